use super::*;
use crate::context::{FinishHook, FinishHooks, Finished, Outcome};
use crate::proxy::error::{assert_error_json, error_json};
use http::header;
use http_body_util::BodyExt;
use std::sync::Mutex;

/// The requests that ended: outcome and status.
#[derive(Debug, Default)]
struct Ended(Mutex<Vec<(Outcome, Option<StatusCode>)>>);

impl FinishHook for Ended {
    fn finished(&self, request: &Finished<'_>) {
        let entry = (request.outcome, request.context.status);
        self.0.lock().expect("lock").push(entry);
    }
}

fn limits(max_streams: usize, max_connections: usize) -> Limits {
    let config = ServerConfig {
        max_streams,
        max_connections,
        ..ServerConfig::default()
    };
    Limits::new(&config)
}

#[tokio::test]
async fn overloaded_is_a_503_with_retry_after_and_openai_json() {
    let response = overloaded(Limit::Streams);
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE, "status");
    assert_eq!(
        response.headers()[header::RETRY_AFTER],
        "1",
        "retry-after tells SDKs when to retry"
    );
    assert_error_json(
        &error_json(response).await,
        "overloaded",
        503,
        &["server.max_streams"],
        "the message names the config key",
    );
}

#[test]
fn connection_permits_are_bounded_and_released_on_drop() {
    let limits = limits(4, 2);
    let first = limits.try_connection().expect("first connection admitted");
    let second = limits.try_connection().expect("second connection admitted");
    assert_eq!(limits.connections_open(), 2, "two open");
    assert!(limits.try_connection().is_none(), "the third is refused");
    assert_eq!(limits.rejections(Limit::Connections), 1, "and counted");
    drop(first);
    assert_eq!(
        limits.connections_open(),
        1,
        "a dropped permit frees its slot"
    );
    let third = limits.try_connection();
    assert!(third.is_some(), "a freed slot admits again");
    drop((second, third));
    assert_eq!(limits.connections_open(), 0, "all released");
}

#[tokio::test]
async fn a_stream_permit_lives_until_the_body_ends() {
    let limits = Arc::new(limits(1, 10));
    // Boxed, as the meter's future is (admission takes an `Unpin` one).
    let inner = tower::service_fn(|_req: Request<()>| {
        Box::pin(async {
            let body: ResponseBody = Either::Right(Full::new(Bytes::from_static(b"hello")));
            Ok::<_, Infallible>(Response::new(body))
        })
    });
    let ended = Arc::new(Ended::default());
    let hooks = FinishHooks::new([ended.clone() as Arc<dyn FinishHook>]);
    // A request as the server dispatches it: with its context.
    let request = || {
        let mut req = Request::new(());
        Box::new(RequestContext::new(tokio::time::Instant::now(), None).with_hooks(hooks.clone()))
            .put(req.extensions_mut());
        req
    };
    let mut service = AdmissionLayer::new(Arc::clone(&limits)).layer(inner);
    let first = service.call(request()).await.expect("infallible");
    assert_eq!(first.status(), StatusCode::OK, "the first is admitted");
    assert_eq!(
        limits.streams_admitted(),
        1,
        "its permit is held by the body"
    );

    let second = service.call(request()).await.expect("infallible");
    assert_eq!(
        second.status(),
        StatusCode::SERVICE_UNAVAILABLE,
        "the second is over max_streams"
    );
    assert_eq!(limits.rejections(Limit::Streams), 1, "counted");
    // (The stand-in inner service drops the first request's context: that one ends cancelled.)
    assert_eq!(
        ended.0.lock().expect("lock").last(),
        Some(&(Outcome::Overloaded, Some(StatusCode::SERVICE_UNAVAILABLE))),
        "the refused request ended at once, overloaded"
    );

    let body = first.into_body().collect().await.expect("body").to_bytes();
    assert_eq!(&body[..], b"hello", "the body passes unchanged");
    assert_eq!(
        limits.streams_admitted(),
        0,
        "released at the end of the body"
    );
    let third = service.call(request()).await.expect("infallible");
    assert_eq!(third.status(), StatusCode::OK, "admitted again");
}

#[tokio::test]
async fn a_request_back_at_this_tokenmeter_is_refused_at_once_and_others_pass() {
    let limits = Arc::new(limits(1, 10));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let inner = {
        let seen = Arc::clone(&seen);
        tower::service_fn(move |req: Request<()>| {
            let via = req
                .headers()
                .get(crate::proxy::headers::VIA)
                .map(|value| value.to_str().expect("ascii").to_owned());
            seen.lock().expect("lock").push(via);
            Box::pin(async {
                let body: ResponseBody = Either::Right(Full::new(Bytes::from_static(b"ok")));
                Ok::<_, Infallible>(Response::new(body))
            })
        })
    };
    let ended = Arc::new(Ended::default());
    let hooks = FinishHooks::new([ended.clone() as Arc<dyn FinishHook>]);
    let request = |via: Option<String>| {
        let mut req = Request::new(());
        if let Some(via) = via {
            req.headers_mut().insert(
                crate::proxy::headers::VIA,
                http::HeaderValue::from_str(&via).expect("value"),
            );
        }
        Box::new(RequestContext::new(tokio::time::Instant::now(), None).with_hooks(hooks.clone()))
            .put(req.extensions_mut());
        req
    };
    let id = limits.instance().to_string();
    let mut service = AdmissionLayer::new(Arc::clone(&limits)).layer(inner);

    // From another tokenmeter (a gateway in front): passes, with our id after the gateway's.
    let passed = service
        .call(request(Some("aaaaaaaaaaaaaaaa".to_owned())))
        .await
        .expect("infallible");
    assert_eq!(passed.status(), StatusCode::OK);
    drop(passed);
    assert_eq!(
        seen.lock().expect("lock").as_slice(),
        [Some("aaaaaaaaaaaaaaaa".to_owned())],
        "passed down as it came: the upstream client appends our id (proxy::h1's tests)"
    );

    // Back at us, though the one stream permit is free: 508 at once, the inner service not called.
    let looped = service
        .call(request(Some(format!("aaaaaaaaaaaaaaaa, {id}"))))
        .await
        .expect("infallible");
    assert_eq!(looped.status(), StatusCode::LOOP_DETECTED, "508");
    assert!(
        looped.headers().get(header::RETRY_AFTER).is_none(),
        "retrying cannot help"
    );
    assert_error_json(
        &error_json(looped).await,
        "loop_detected",
        508,
        &[&format!("(instance {id})"), "upstream.urls"],
        "names this tokenmeter and the keys to check",
    );
    assert_eq!(seen.lock().expect("lock").len(), 1, "never sent on");
    assert_eq!(limits.loops(), 1, "counted");
    assert_eq!(
        limits.rejections(Limit::Streams),
        0,
        "not a limit's refusal"
    );
    assert_eq!(
        ended.0.lock().expect("lock").last(),
        Some(&(Outcome::ClientError, Some(StatusCode::LOOP_DETECTED))),
        "ended at once"
    );
    assert!(
        limits
            .render()
            .contains("tokenmeter_rejected_total{reason=\"loop\"} 1\n"),
        "exported by reason"
    );
}

#[test]
fn render_is_prometheus_text_with_every_reason() {
    let limits = limits(1, 1);
    let _held = limits.try_connection();
    assert!(limits.try_connection().is_none(), "refused");
    let text = limits.render();
    assert!(
        text.contains("tokenmeter_rejected_total{reason=\"max_connections\"} 1\n"),
        "{text}"
    );
    assert!(
        text.contains("tokenmeter_rejected_total{reason=\"max_streams\"} 0\n"),
        "{text}"
    );
    assert!(
        text.contains("tokenmeter_rejected_total{reason=\"loop\"} 0\n"),
        "{text}"
    );
    assert!(text.contains("tokenmeter_connections_open 1\n"), "{text}");
    assert!(text.contains("tokenmeter_streams_admitted 0\n"), "{text}");
}

#[tokio::test]
async fn a_lowered_limit_takes_permits_back_as_connections_close_and_a_raised_one_admits_at_once() {
    let limits = limits(4, 3);
    let held: Vec<_> = (0..3)
        .map(|_| limits.try_connection().expect("admitted"))
        .collect();
    limits.resize(&ServerConfig {
        max_streams: 4,
        max_connections: 1,
        ..ServerConfig::default()
    });
    assert_eq!(limits.connections_open(), 3, "nothing open is cut");
    let mut held = held.into_iter();
    drop(held.next());
    tokio::task::yield_now().await;
    assert!(
        limits.try_connection().is_none(),
        "two open, limit one: the freed permit is taken back"
    );
    drop(held.next());
    // The taker gets the second permit and forgets both.
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert_eq!(limits.connections_open(), 1, "one still open");
    assert!(limits.try_connection().is_none(), "at the new limit of one");
    drop(held.next());
    assert_eq!(limits.connections_open(), 0);
    let one = limits.try_connection().expect("the new limit admits one");
    assert!(limits.try_connection().is_none(), "and only one");

    limits.resize(&ServerConfig {
        max_streams: 4,
        max_connections: 3,
        ..ServerConfig::default()
    });
    let more: Vec<_> = (0..2).filter_map(|_| limits.try_connection()).collect();
    assert_eq!(more.len(), 2, "a raised limit admits at once");
    assert_eq!(limits.connections_open(), 3);
    drop((one, more));
}

#[test]
fn a_limit_refusal_says_when_to_retry_in_milliseconds_too_and_the_connection_limit_closes() {
    let streams = overloaded(Limit::Streams);
    assert_eq!(
        streams.headers()["retry-after-ms"],
        "1000",
        "as every refusal that asks to wait"
    );
    assert!(
        streams.headers().get(header::CONNECTION).is_none(),
        "the stream limit keeps the connection"
    );
    let connections = ProxyError::from(over_limit(Limit::Connections).closing()).to_response();
    assert_eq!(connections.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(connections.headers()[header::CONNECTION], "close");
    assert_eq!(
        over_limit(Limit::Connections).outcome(),
        Outcome::Overloaded
    );
}
