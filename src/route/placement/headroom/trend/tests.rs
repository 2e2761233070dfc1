//! The trend on synthetic rates: flat with noise, a ramp through noise, a fall.
use super::*;

const SPAN: Duration = Duration::from_secs(60);

/// A deterministic stand-in for a Poisson rate's noise: ±`amplitude`, alternating in a
/// pattern with no trend of its own.
fn noise(i: usize, amplitude: f64) -> f64 {
    const PATTERN: [f64; 8] = [1.0, -0.6, 0.3, -1.0, 0.8, -0.2, -0.7, 0.4];
    PATTERN[i % PATTERN.len()] * amplitude
}

#[test]
fn a_flat_noisy_load_has_no_trend() {
    let mut trend = Trend::default();
    for i in 0..120 {
        trend.observe(i as f64, 8.0 + noise(i, 3.0), SPAN);
        assert_eq!(trend.rising(), 0.0, "second {i}");
    }
}

#[test]
fn a_ramp_through_noise_is_read_at_its_slope() {
    let mut trend = Trend::default();
    // Flat at 6 for a minute, then rising 0.1 a second (6 to 18 over two minutes).
    let mut first_seen = None;
    for i in 0..180 {
        let ramp = if i < 60 { 0.0 } else { 0.1 * (i - 60) as f64 };
        trend.observe(i as f64, 6.0 + ramp + noise(i, 2.5), SPAN);
        if i < 60 {
            assert_eq!(trend.rising(), 0.0, "second {i}");
        } else if trend.rising() > 0.0 && first_seen.is_none() {
            first_seen = Some(i - 60);
        }
    }
    let first_seen = first_seen.expect("the ramp is seen");
    assert!(first_seen <= 30, "seen {first_seen} s into the ramp");
    // A whole span into the ramp, the rise is the ramp's slope less two standard errors of the
    // noise: at most the slope, and most of it.
    let slope = trend.rising();
    assert!((0.06..=0.1).contains(&slope), "{slope}");
}

#[test]
fn a_fall_is_no_trend_and_old_samples_are_forgotten() {
    let mut trend = Trend::default();
    for i in 0..60 {
        trend.observe(i as f64, 18.0 - 0.1 * i as f64, SPAN);
    }
    assert_eq!(trend.rising(), 0.0);
    // A rise after it: once the fall has left the span, only the rise is fitted.
    for i in 60..130 {
        trend.observe(i as f64, 12.0 + 0.05 * (i - 60) as f64, SPAN);
    }
    assert!((trend.rising() - 0.05).abs() < 1e-9, "{}", trend.rising());
}

#[test]
fn samples_that_do_not_cover_the_span_say_nothing() {
    let mut trend = Trend::default();
    // A steep rise, without noise: nothing until 54 s (90 % of the span) are covered.
    for i in 0..54 {
        trend.observe(i as f64, i as f64 * 10.0, SPAN);
        assert_eq!(trend.rising(), 0.0, "second {i}");
    }
    trend.observe(54.0, 540.0, SPAN);
    assert!((trend.rising() - 10.0).abs() < 1e-9, "{}", trend.rising());
}
