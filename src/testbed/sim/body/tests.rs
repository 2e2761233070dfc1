use std::future::poll_fn;

use super::*;
use crate::testbed::sim::api::{Endpoint, UsageOptions};

async fn next_frame(body: &mut SseBody) -> Option<Result<Frame<Bytes>, EngineGone>> {
    poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx)).await
}

#[tokio::test]
async fn one_frame_per_chunk() {
    let (tx, rx) = mpsc::unbounded_channel();
    let usage = UsageOptions {
        include_usage: true,
        continuous: false,
    };
    let formatter = StreamFormatter::new(Endpoint::Chat, "chatcmpl-1", 1, "m", 4, usage);
    let mut body = SseBody::new(rx, formatter);
    tx.send(Progress {
        id: 0,
        new_tokens: 1,
        first: true,
        finished: false,
        cached_tokens: 0,
        transferred_tokens: 0,
    })
    .expect("send");
    tx.send(Progress {
        id: 0,
        new_tokens: 1,
        first: false,
        finished: true,
        cached_tokens: 0,
        transferred_tokens: 0,
    })
    .expect("send");
    let mut frames = Vec::new();
    while let Some(frame) = next_frame(&mut body).await {
        let data = frame.expect("no error").into_data().expect("data frame");
        frames.push(String::from_utf8(data.to_vec()).expect("utf-8"));
    }
    assert_eq!(
        frames.len(),
        5,
        "role, 2 content, usage, [DONE]: {frames:#?}"
    );
    for frame in &frames {
        assert!(
            frame.starts_with("data: ") && frame.ends_with("\n\n"),
            "one whole event: {frame:?}"
        );
        assert_eq!(
            frame.matches("\n\n").count(),
            1,
            "exactly one event per frame: {frame:?}"
        );
    }
    assert!(body.is_end_stream(), "ends after [DONE]");
}

#[tokio::test]
async fn engine_gone_mid_stream_is_an_error() {
    let (tx, rx) = mpsc::unbounded_channel();
    let formatter = StreamFormatter::new(
        Endpoint::Completions,
        "cmpl-1",
        1,
        "m",
        4,
        UsageOptions::default(),
    );
    let mut body = SseBody::new(rx, formatter);
    drop(tx);
    assert!(
        matches!(next_frame(&mut body).await, Some(Err(EngineGone))),
        "cut stream is an error"
    );
    assert!(next_frame(&mut body).await.is_none(), "then the body ends");
}

#[tokio::test]
async fn dropping_the_body_closes_the_engine_side() {
    let (tx, rx) = mpsc::unbounded_channel::<Progress>();
    let formatter = StreamFormatter::new(
        Endpoint::Completions,
        "cmpl-1",
        1,
        "m",
        4,
        UsageOptions::default(),
    );
    drop(SseBody::new(rx, formatter));
    assert!(tx.is_closed(), "the engine sees the client went away");
}
