use super::*;

/// A calibrator with a prior of 0.25 tokens per byte over a `window` of responses, and the
/// model it is asked about.
fn calibrator(window: u32) -> (Calibrator, Arc<str>) {
    (Calibrator::new(0.25, window, None), Arc::from("m"))
}

/// A prompt of `text_bytes` bytes of text.
fn text(text_bytes: u64) -> PromptSize {
    PromptSize {
        text_bytes,
        token_ids: 0,
    }
}

#[test]
fn calibration_converges_on_the_backend_ratio() {
    let (calibrator, model) = calibrator(50);
    let size = text(2000);
    assert_eq!(
        calibrator.estimate(&model, size),
        500,
        "the prior before any response"
    );
    // The backend's tokenizer makes 0.5 tokens per byte (e.g. "w w w ..." on the sim).
    for i in 0..200u64 {
        let size = text(1000 + 10 * i);
        let estimated = calibrator.estimate(&model, size);
        calibrator.observe(&model, size, estimated, size.text_bytes / 2);
    }
    let ratio = calibrator.tokens_per_byte(&model);
    assert!(
        (ratio - 0.5).abs() < 0.001,
        "converged to 0.5 tokens/byte, got {ratio}"
    );
    assert_eq!(
        calibrator.estimate(&model, size),
        1000,
        "2000 bytes are now estimated at 1000 tokens"
    );
    let other: Arc<str> = Arc::from("other-model");
    assert_eq!(
        calibrator.tokens_per_byte(&other),
        0.25,
        "each model has its own ratio"
    );
}

#[test]
fn token_ids_do_not_teach_the_text_ratio() {
    let (calibrator, model) = calibrator(10);
    let size = PromptSize {
        text_bytes: 0,
        token_ids: 700,
    };
    assert_eq!(calibrator.estimate(&model, size), 700, "exact");
    calibrator.observe(&model, size, 700, 700);
    assert_eq!(
        calibrator.tokens_per_byte(&model),
        0.25,
        "no text: the ratio is unchanged"
    );
}
