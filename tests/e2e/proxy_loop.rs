//! The loop guard: a request that comes back to the tokenmeter that forwarded it (an upstream
//! pointing at the proxy's own port, or two tokenmeters pointing at each other) is refused on its
//! first return with a 508 that names the loop, and exactly one forwarded copy of it exists; a
//! chain of different tokenmeters (a gateway in front of a sidecar) passes, each adding its id to
//! `x-tokenmeter-via`, which goes upstream only.

use crate::support;
use std::net::SocketAddr;
use std::time::Duration;

use support::backend::{replay, Backend};
use support::client::{self, Streamed};
use support::{config_for, fixture, prom, start_proxy, wait_for_metric};
use tokenmeter::server::{self, ServerHandle};
use tokio::net::TcpListener;

const CHAT: &str = "/v1/chat/completions";
const BODY: &str = r#"{"model":"m","messages":[{"role":"user","content":"Hi"}],"stream":true,"stream_options":{"include_usage":true}}"#;
const VIA: &str = "x-tokenmeter-via";

/// A traffic listener bound before the proxy starts, so its address can be an upstream.
async fn bound() -> (TcpListener, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind traffic");
    let addr = listener.local_addr().expect("its address");
    (listener, addr)
}

/// Starts a proxy on `traffic` whose upstream is `upstream`.
async fn proxy_on(traffic: TcpListener, upstream: SocketAddr) -> ServerHandle {
    let admin = TcpListener::bind("127.0.0.1:0").await.expect("bind admin");
    server::spawn(config_for(&format!("http://{upstream}")), traffic, admin).expect("proxy starts")
}

fn error_of(streamed: &Streamed) -> serde_json::Value {
    let json: serde_json::Value =
        serde_json::from_slice(&streamed.bytes()).expect("an OpenAI-style JSON error");
    json["error"].clone()
}

/// The admin endpoint's exposition (where the admission series are written).
async fn admin_metrics(proxy: &ServerHandle) -> String {
    let (status, text) = client::get(proxy.admin_addr, "/metrics").await;
    assert_eq!(status, 200);
    text
}

#[tokio::test]
async fn a_proxy_whose_upstream_is_itself_refuses_the_request_on_its_first_return() {
    let (traffic, addr) = bound().await;
    let proxy = proxy_on(traffic, addr).await;
    let id = proxy.limits.instance().to_string();

    let streamed = client::post(proxy.traffic_addr, CHAT, BODY).await;
    assert_eq!(streamed.status, 508, "Loop Detected: {}", streamed.text());
    let error = error_of(&streamed);
    assert_eq!(error["type"], "loop_detected");
    assert_eq!(error["code"], 508);
    let message = error["message"].as_str().expect("a message");
    assert_eq!(
        message,
        format!(
            "this request already passed through this tokenmeter (instance {id}): its upstream \
             points back at it; check upstream.urls / pools (TOKENMETER_UPSTREAM)"
        ),
        "the message names the loop, this tokenmeter and what to check, not max_streams"
    );
    assert!(
        streamed.headers.get(VIA).is_none(),
        "the hop header goes upstream only"
    );

    // Both ends are counted once the outer request has finished: the client's request (its
    // backend, this proxy, answered 508: an upstream error) and the one copy it forwarded,
    // refused here. A second forwarded copy would be a second request and a second loop.
    let backend_label = addr.to_string();
    wait_for_metric(
        &proxy,
        "tokenmeter_requests_total",
        &[
            ("outcome", "upstream_error"),
            ("backend", backend_label.as_str()),
        ],
        1.0,
    )
    .await;
    let text = proxy.metrics.render();
    assert_eq!(
        prom::sum(&text, "tokenmeter_requests_total", &[]),
        2.0,
        "the client's request and exactly one forwarded copy: {text}"
    );
    assert_eq!(
        prom::value(
            &text,
            "tokenmeter_requests_total",
            &[("outcome", "client_error"), ("backend", "none")]
        ),
        1.0,
        "the copy, refused before it was routed anywhere"
    );
    assert_eq!(proxy.limits.loops(), 1, "one copy came back, once");
    let exported = admin_metrics(&proxy).await;
    assert!(
        exported.contains("tokenmeter_rejected_total{reason=\"loop\"} 1\n"),
        "counted by reason for alerting: {exported}"
    );
    assert!(
        exported.contains("tokenmeter_rejected_total{reason=\"max_streams\"} 0\n"),
        "never the stream limit: {exported}"
    );

    // Any path loops the same way, a GET included.
    let (status, body) = client::get(proxy.traffic_addr, "/v1/models").await;
    assert_eq!(status, 508, "{body}");
    assert_eq!(proxy.limits.loops(), 2);
}

#[tokio::test]
async fn two_tokenmeters_pointing_at_each_other_stop_the_request_where_it_came_back() {
    let (traffic_a, addr_a) = bound().await;
    let (traffic_b, addr_b) = bound().await;
    let a = proxy_on(traffic_a, addr_b).await;
    let b = proxy_on(traffic_b, addr_a).await;

    let streamed = client::post(a.traffic_addr, CHAT, BODY).await;
    assert_eq!(streamed.status, 508, "{}", streamed.text());
    let message = error_of(&streamed)["message"]
        .as_str()
        .expect("a message")
        .to_owned();
    assert!(
        message.contains(&format!("(instance {})", a.limits.instance())),
        "A refused it, the tokenmeter it came back to: {message}"
    );
    assert_eq!(a.limits.loops(), 1, "back at A once");
    assert_eq!(b.limits.loops(), 0, "B saw it once, with A's id only");
    // A: the client's request and the copy B sent back; B: A's one copy, which it forwarded
    // once (both answered 508 by their upstream: upstream errors).
    wait_for_metric(&a, "tokenmeter_requests_total", &[], 2.0).await;
    wait_for_metric(&b, "tokenmeter_requests_total", &[], 1.0).await;
    assert_eq!(
        prom::sum(
            &b.metrics.render(),
            "tokenmeter_requests_total",
            &[("outcome", "upstream_error")]
        ),
        1.0,
        "B counts A's 508 as its backend's error"
    );
}

#[tokio::test]
async fn a_gateway_in_front_of_a_sidecar_still_works_and_the_backend_sees_both_hops() {
    let mut backend = Backend::start(replay("vllm-chat-usage.sse", Duration::ZERO)).await;
    let sidecar = start_proxy(config_for(&backend.url)).await;
    let gateway = start_proxy(config_for(&format!("http://{}", sidecar.traffic_addr))).await;
    let (gateway_id, sidecar_id) = (
        gateway.limits.instance().to_string(),
        sidecar.limits.instance().to_string(),
    );
    assert_ne!(gateway_id, sidecar_id, "two tokenmeters, two ids");

    let streamed = client::post(gateway.traffic_addr, CHAT, BODY).await;
    assert_eq!(streamed.status, 200);
    assert!(streamed.error.is_none(), "clean end: {:?}", streamed.error);
    assert_eq!(
        streamed.bytes(),
        fixture("vllm-chat-usage.sse"),
        "the stream, byte for byte, through both"
    );
    assert!(
        streamed.headers.get(VIA).is_none(),
        "the hop header goes upstream only"
    );
    let seen = backend.next_request().await;
    assert_eq!(
        seen.header(VIA),
        Some(format!("{gateway_id}, {sidecar_id}")),
        "each tokenmeter appended its id, in the order of the hops"
    );
    assert_eq!((gateway.limits.loops(), sidecar.limits.loops()), (0, 0));
    for proxy in [&gateway, &sidecar] {
        wait_for_metric(
            proxy,
            "tokenmeter_requests_total",
            &[("outcome", "ok")],
            1.0,
        )
        .await;
    }
}
