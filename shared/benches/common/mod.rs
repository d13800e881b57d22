//! What the capture benchmarks share: the 4 KB turn the worker's bench hooks build too (`extension/src/bg.js`).

/// A 4 KB turn: prose, a code block, a list, and one secret.
pub fn turn(i: usize) -> String {
    let mut s = format!("Turn {i}: here is how I set up the service.\n\n");
    while s.len() < 4096 - 200 {
        s.push_str(
            "The deployment reads its settings from the environment and retries with backoff.\n",
        );
        s.push_str("    fn main() { let x = compute(42); println!(\"{x}\"); }\n");
        s.push_str("- first item of a list\n- second item with `inline code`\n");
    }
    s.push_str("export API_KEY=\"sk-proj-abcdefghijklmnopqrstuvwx\"\n");
    s.truncate(4096);
    s
}

/// The median of `v` (sorted in place).
#[allow(dead_code)]
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
