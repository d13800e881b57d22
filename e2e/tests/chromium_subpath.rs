//! A relay published under a sub-path (`https://host/personkit/`, as behind a reverse proxy): the extension pairs
//! with that URL and every request it makes goes under the path. The counting proxy stands for the reverse
//! proxy: it forwards `/personkit/…` to the real relay with the prefix removed and answers 404 to anything else.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use personkit_e2e::fixtures;
use personkit_e2e::session::{LAND_TIMEOUT, Session};

#[test]
fn a_relay_under_a_sub_path_pairs_and_receives_every_turn() {
    let s = Session::start_full(&[], "/personkit", &["browser-ext:chatgpt"]).unwrap();
    assert!(s.proxy.url().ends_with("/personkit/"), "{}", s.proxy.url());
    let case = fixtures::cases("chatgpt")
        .unwrap()
        .into_iter()
        .find(|c| c.name.ends_with("/short"))
        .unwrap();
    s.open_case(&case).unwrap();
    let problems = s.wait_landed(&case, LAND_TIMEOUT).unwrap();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let seen = s.proxy.seen();
    assert!(
        seen.iter()
            .any(|r| r.path == "/personkit/v1/pair" && r.status == 200),
        "pairing went under the sub-path: {seen:?}"
    );
    assert!(
        seen.iter()
            .any(|r| r.path == "/personkit/v1/observations" && r.status == 200),
        "turns went under the sub-path: {seen:?}"
    );
    assert!(
        seen.iter().all(|r| r.status != 404),
        "a request left the sub-path: {seen:?}"
    );
}
