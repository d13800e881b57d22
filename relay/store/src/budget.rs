//! Bounded reads: every statement a request runs stops when the request's time is up, when its client has gone,
//! or when the relay is shutting down.
//!
//! A [`Budget`] is a deadline plus a cancel flag. [`within`] installs it as the connection's SQLite progress
//! handler for the length of one closure: SQLite then asks it every few thousand virtual-machine steps and, once
//! it answers "stop", every statement fails with `SQLITE_INTERRUPT` ([`DbError::is_interrupted`]) and the read
//! unwinds through the caller's ordinary error path. [`Db::read`](crate::Db::read) gives every read
//! [`READ_BUDGET`]; request handlers make their own with [`Budget::new`] and hold its [`Budget::cancel_on_drop`]
//! guard in their future, so a client that disconnects stops the work it started.
//!
//! What this cannot stop is one long step inside SQLite that never returns to the virtual machine (FTS5 parsing a
//! huge MATCH expression): query text is bounded for that ([`check_query_text`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rusqlite::Connection;

/// How long one read may take unless its caller says otherwise.
pub const READ_BUDGET: Duration = Duration::from_secs(10);

/// Virtual-machine steps between two looks at the budget (SQLite runs some millions a second).
const STEPS_PER_CHECK: i32 = 4_000;

/// The most characters a search or word filter may hold.
pub const MAX_QUERY_CHARS: usize = 2_000;
/// The most distinct words a search or word filter may hold.
pub const MAX_QUERY_WORDS: usize = 128;

/// A deadline and a cancel flag, shared by the request that made it and the read that runs under it.
#[derive(Debug, Clone)]
pub struct Budget {
    deadline: Instant,
    cancelled: Arc<AtomicBool>,
    /// Set when the whole relay stops (every budget made by [`crate::Db`] shares one).
    closing: Option<Arc<AtomicBool>>,
}

impl Budget {
    /// A budget of `limit` from now.
    pub fn new(limit: Duration) -> Budget {
        Budget {
            deadline: Instant::now() + limit,
            cancelled: Arc::new(AtomicBool::new(false)),
            closing: None,
        }
    }

    pub(crate) fn with_closing(mut self, closing: Arc<AtomicBool>) -> Budget {
        self.closing = Some(closing);
        self
    }

    /// Whether the work should stop now.
    pub fn spent(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed)
            || self
                .closing
                .as_ref()
                .is_some_and(|c| c.load(Ordering::Relaxed))
            || Instant::now() >= self.deadline
    }

    /// Stops the work at its next check.
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::Relaxed);
    }

    /// A guard that cancels the budget when dropped: held by an async handler, it stops the blocking read the
    /// handler started when the handler's future is dropped (the client went away) as well as when it ends.
    pub fn cancel_on_drop(&self) -> CancelOnDrop {
        CancelOnDrop(self.cancelled.clone())
    }
}

/// See [`Budget::cancel_on_drop`].
#[derive(Debug)]
pub struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Runs `f` on `conn` with every statement interrupted once `budget` is spent.
pub fn within<T>(conn: &Connection, budget: &Budget, f: impl FnOnce(&Connection) -> T) -> T {
    let b = budget.clone();
    conn.progress_handler(STEPS_PER_CHECK, Some(move || b.spent()));
    let out = f(conn);
    conn.progress_handler(0, None::<fn() -> bool>);
    out
}

/// Why a query text is refused before it reaches SQLite.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryTextError {
    #[error("the query is {chars} characters long; the limit is {MAX_QUERY_CHARS}")]
    TooLong { chars: usize },
    #[error("the query has {words} different words; the limit is {MAX_QUERY_WORDS}")]
    TooManyWords { words: usize },
}

impl QueryTextError {
    /// What to do instead.
    pub fn hint(&self) -> &'static str {
        "search with the few words that matter most (or a phrase from the text), and narrow it with a filter"
    }
}

/// Refuses a query text over [`MAX_QUERY_CHARS`] characters or [`MAX_QUERY_WORDS`] distinct words (runs of
/// letters and digits, case-folded) — the bound that keeps FTS5's expression parser, which no progress handler
/// can interrupt, to a small input.
pub fn check_query_text(text: &str) -> Result<(), QueryTextError> {
    let chars = text.chars().count();
    if chars > MAX_QUERY_CHARS {
        return Err(QueryTextError::TooLong { chars });
    }
    let mut seen = std::collections::HashSet::new();
    for w in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        seen.insert(w.to_lowercase());
    }
    if seen.len() > MAX_QUERY_WORDS {
        return Err(QueryTextError::TooManyWords { words: seen.len() });
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// A statement that would run for minutes: a recursive count to ten billion.
    const ENDLESS: &str =
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 10000000000)
                           SELECT count(*) FROM c";

    #[test]
    fn a_spent_budget_interrupts_a_running_statement_and_the_connection_stays_usable() {
        let conn = Connection::open_in_memory().unwrap();
        let budget = Budget::new(Duration::from_millis(200));
        let r = within(&conn, &budget, |c| {
            c.query_row(ENDLESS, [], |r| r.get::<_, i64>(0))
        });
        let e = crate::DbError::from(r.unwrap_err());
        assert!(e.is_interrupted(), "{e}");
        // The handler is gone afterwards: the same connection runs a statement to its end.
        let n: i64 = conn
            .query_row(
                "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100000)
                 SELECT count(*) FROM c",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(n, 100_000);
    }

    #[test]
    fn a_dropped_guard_cancels_the_read_from_another_thread() {
        let conn = Connection::open_in_memory().unwrap();
        let budget = Budget::new(Duration::from_secs(3600));
        let guard = budget.cancel_on_drop();
        let dropper = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            drop(guard);
        });
        let r = within(&conn, &budget, |c| {
            c.query_row(ENDLESS, [], |r| r.get::<_, i64>(0))
        });
        dropper.join().unwrap();
        assert!(crate::DbError::from(r.unwrap_err()).is_interrupted());
    }

    #[test]
    fn query_text_is_bounded_by_characters_and_distinct_words() {
        assert_eq!(check_query_text("borrow checker"), Ok(()));
        // Repeating a word does not count against the word limit.
        assert_eq!(check_query_text(&"rust ".repeat(300)), Ok(()));
        let many: String = (0..129).map(|i| format!("w{i} ")).collect();
        assert_eq!(
            check_query_text(&many),
            Err(QueryTextError::TooManyWords { words: 129 })
        );
        let long = "é".repeat(MAX_QUERY_CHARS + 1);
        assert_eq!(
            check_query_text(&long),
            Err(QueryTextError::TooLong {
                chars: MAX_QUERY_CHARS + 1
            })
        );
        assert_eq!(check_query_text(&"é".repeat(MAX_QUERY_CHARS)), Ok(()));
    }
}
