//! Properties of the heat formula: monotone in accesses, raw heat halving every 168 hours, always in 0..=1, the
//! tier boundaries, and the search tiebreak's 10 % bound.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use personkit_heat::{
    HALF_LIFE_HOURS, HOT, Tier, WARM, effective_access, heat, raw_heat, tiebreak, tier,
};
use proptest::prelude::*;

fn hours() -> impl Strategy<Value = f64> {
    prop_oneof![0.0..10_000.0f64, Just(0.0), -100.0..0.0f64, Just(1e9)]
}

proptest! {
    #[test]
    fn never_above_one_nor_below_zero(n in any::<i64>(), h in hours()) {
        let v = heat(n, h);
        prop_assert!((0.0..=1.0).contains(&v), "heat({n}, {h}) = {v}");
    }

    #[test]
    fn more_accesses_never_cool(n in 0i64..1_000_000, extra in 0i64..1_000, h in hours()) {
        prop_assert!(heat(n + extra, h) >= heat(n, h));
    }

    #[test]
    fn later_is_never_hotter(n in 0i64..1_000_000, h in 0.0..10_000.0f64, later in 0.0..10_000.0f64) {
        prop_assert!(heat(n, h + later) <= heat(n, h));
    }

    #[test]
    fn raw_heat_halves_in_a_week(e in 0.0..1e6f64, h in 0.0..10_000.0f64) {
        let now = raw_heat(e, h);
        let week_later = raw_heat(e, h + HALF_LIFE_HOURS);
        prop_assert!((week_later - now / 2.0).abs() <= 1e-9 * now.max(1.0));
        // With the accesses fading too, a week at least halves it.
        let n = e as i64;
        let full_now = raw_heat(effective_access(n, h), h);
        let full_later = raw_heat(effective_access(n, h + HALF_LIFE_HOURS), h + HALF_LIFE_HOURS);
        prop_assert!(full_later <= full_now / 2.0 + 1e-9);
    }

    #[test]
    fn tiers_follow_the_boundaries(v in 0.0..=1.0f64) {
        let t = tier(v);
        let want = if v >= HOT { Tier::Hot } else if v >= WARM { Tier::Warm } else { Tier::Cold };
        prop_assert_eq!(t, want);
    }

    /// However hot `b` and however cold `a`, `b` passes `a` only if `a` scored at most 10 % above it.
    #[test]
    fn heat_never_passes_a_result_more_than_ten_percent_better(
        b in 1e-9..1e3f64, margin in 1.1000001..100.0f64, ha in 0.0..=1.0f64, hb in 0.0..=1.0f64
    ) {
        let a = b * margin;
        prop_assert!(tiebreak(a, ha) > tiebreak(b, hb));
    }

    #[test]
    fn equal_scores_are_ordered_by_heat(s in 1e-9..1e3f64, ha in 0.0..=1.0f64, hb in 0.0..=1.0f64) {
        prop_assume!(ha > hb);
        prop_assert!(tiebreak(s, ha) > tiebreak(s, hb));
    }
}

#[test]
fn a_week_halves_the_raw_value_exactly() {
    assert!((raw_heat(8.0, 0.0) - 8.0).abs() < 1e-12);
    assert!((raw_heat(8.0, 168.0) - 4.0).abs() < 1e-12);
    assert!((raw_heat(8.0, 336.0) - 2.0).abs() < 1e-12);
}
