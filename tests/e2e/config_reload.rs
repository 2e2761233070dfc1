//! Live reconfiguration of a running proxy (the reload SIGHUP and the file watch trigger, applied
//! through the server's handle): streams in flight finish byte for byte on their backend and are
//! counted once; new requests follow the new config (a backend added takes traffic, a removed one
//! only drains); an invalid config changes nothing; restart-only keys are reported.

use crate::support;
use std::time::Duration;

use tokenmeter::config::{BalanceLoad, Config, PoolConfig};

use support::backend::{Backend, Script, Seen};
use support::gated::Gated;
use support::{client, config_for, fixture, prom, start_proxy};

const CHAT: &str = "/v1/chat/completions";
const BODY: &str = r#"{"model":"m","messages":[{"role":"user","content":"Hi"}],"stream":true,"max_tokens":7,"stream_options":{"include_usage":true}}"#;

/// The vLLM fixture's events, `gap` apart.
fn vllm(gap: Duration) -> impl Fn(&Seen) -> Script {
    support::backend::replay("vllm-chat-usage.sse", gap)
}

fn authority(url: &str) -> String {
    url.trim_start_matches("http://").to_owned()
}

/// One round-robin pool of `urls` (deterministic spreading for the assertions).
fn pool_of(urls: &[&str]) -> Config {
    let mut config = config_for("http://127.0.0.1:1");
    config.pools = vec![PoolConfig {
        name: "main".to_owned(),
        urls: urls.iter().map(|u| (*u).to_owned()).collect(),
        balance: BalanceLoad::RoundRobin,
        ..PoolConfig::default()
    }];
    config.validate().expect("valid config");
    config
}

fn requests_to(text: &str, url: &str) -> f64 {
    prom::sum(
        text,
        "tokenmeter_requests_total",
        &[("backend", authority(url).as_str())],
    )
}

#[tokio::test]
async fn a_stream_in_flight_finishes_on_its_backend_while_new_requests_follow_the_reload() {
    // Old: its stream stays open until the reload and the next request are done; new: fast.
    let mut old = Gated::start(false, 1).await;
    let mut new = Backend::start(vllm(Duration::from_millis(1))).await;
    let proxy = start_proxy(pool_of(&[&old.url])).await;

    let mut open = client::open(proxy.traffic_addr, CHAT, BODY).await;
    let first = open.next_frame().await.expect("a first frame").expect("ok");
    old.requests
        .recv()
        .await
        .expect("the stream reached the old backend");

    let applied = proxy
        .reload(pool_of(&[&new.url]))
        .await
        .expect("the reload applies");
    assert!(applied.restart_required.is_empty(), "{applied:?}");
    let moved = client::post(proxy.traffic_addr, CHAT, BODY).await;
    assert_eq!(moved.bytes(), fixture("vllm-chat-usage.sse"));
    new.next_request().await;

    old.open();
    let rest = open.collect_after(first).await;
    assert!(rest.error.is_none(), "the stream in flight was not cut");
    assert_eq!(
        rest.bytes(),
        fixture("vllm-chat-usage.sse"),
        "the stream in flight finished byte for byte"
    );
    let text = proxy.metrics.render();
    assert_eq!(
        requests_to(&text, &old.url),
        1.0,
        "counted once, on its backend"
    );
    assert_eq!(
        requests_to(&text, &new.url),
        1.0,
        "the new request went to the new backend"
    );
    assert_eq!(
        prom::sum(&text, "tokenmeter_requests_total", &[("outcome", "ok")]),
        2.0
    );
    assert_eq!(
        prom::sum(
            &text,
            "tokenmeter_tokens_total",
            &[("gen_ai_token_type", "output")]
        ),
        14.0,
        "each stream's tokens counted once"
    );
    assert_eq!(
        prom::value(
            &text,
            "tokenmeter_config_reloads_total",
            &[("result", "ok")]
        ),
        1.0
    );
    // A backend reports a request when it has read it, before it answers: every request of this
    // test has been answered, so any the old backend got after the reload would be here.
    assert!(
        old.requests.try_recv().is_err(),
        "the removed backend got no request after the reload"
    );
}

#[tokio::test]
async fn a_backend_added_by_reload_takes_its_share_and_a_removed_one_drains() {
    let a = Backend::start(vllm(Duration::from_millis(1))).await;
    let b = Backend::start(vllm(Duration::from_millis(1))).await;
    // Its streams stay open until the reload and the requests after it are done.
    let slow = Gated::start(false, 1).await;
    let proxy = start_proxy(pool_of(&[&a.url, &slow.url])).await;

    // One stream in flight on `slow`, which the reload removes.
    let mut on_slow = None;
    for _ in 0..2 {
        let mut open = client::open(proxy.traffic_addr, CHAT, BODY).await;
        let first = open.next_frame().await.expect("frame").expect("ok");
        if open_went_to(&proxy, &slow.url).await {
            on_slow = Some((open, first));
        } else {
            open.collect().await;
        }
    }
    let (open, first) = on_slow.expect("round robin sent one stream to `slow`");

    proxy
        .reload(pool_of(&[&a.url, &b.url]))
        .await
        .expect("the reload applies");
    for _ in 0..6 {
        let streamed = client::post(proxy.traffic_addr, CHAT, BODY).await;
        assert_eq!(streamed.bytes(), fixture("vllm-chat-usage.sse"));
    }
    slow.open();
    let rest = open.collect_after(first).await;
    assert_eq!(
        rest.bytes(),
        fixture("vllm-chat-usage.sse"),
        "the removed backend's stream drained to its end"
    );
    let text = proxy.metrics.render();
    assert_eq!(
        requests_to(&text, &b.url),
        3.0,
        "the added backend took half of the 6 requests after the reload"
    );
    assert_eq!(requests_to(&text, &a.url), 4.0, "1 before + 3 after");
    assert_eq!(
        requests_to(&text, &slow.url),
        1.0,
        "the removed backend got nothing new"
    );
}

/// Whether the one request in flight is on the backend at `url` (its in-flight gauge says 1).
async fn open_went_to(proxy: &tokenmeter::server::ServerHandle, url: &str) -> bool {
    let text = proxy.metrics.render();
    prom::sum(
        &text,
        "tokenmeter_backend_inflight",
        &[("backend", authority(url).as_str())],
    ) == 1.0
}

#[tokio::test]
async fn an_invalid_config_changes_nothing_and_is_counted() {
    let mut backend = Backend::start(vllm(Duration::from_millis(1))).await;
    let proxy = start_proxy(pool_of(&[&backend.url])).await;

    let mut zero_streams = pool_of(&[&backend.url]);
    zero_streams.server.max_streams = 0;
    let err = proxy
        .reload(zero_streams)
        .await
        .expect_err("max_streams = 0 is invalid");
    assert!(
        err.contains("server.max_streams"),
        "the error names the key: {err}"
    );

    let mut missing_ca = pool_of(&["https://localhost:1"]);
    missing_ca.upstream.tls.ca = Some("/nonexistent/ca.crt".into());
    let err = proxy
        .reload(missing_ca)
        .await
        .expect_err("an unreadable CA file");
    assert!(
        err.contains("upstream.tls.ca: cannot read /nonexistent/ca.crt"),
        "the error names the key: {err}"
    );

    let streamed = client::post(proxy.traffic_addr, CHAT, BODY).await;
    assert_eq!(
        streamed.bytes(),
        fixture("vllm-chat-usage.sse"),
        "the running config still serves"
    );
    backend.next_request().await;
    let text = proxy.metrics.render();
    assert_eq!(
        prom::value(
            &text,
            "tokenmeter_config_reloads_total",
            &[("result", "error")]
        ),
        2.0
    );
    assert_eq!(
        prom::value(
            &text,
            "tokenmeter_config_reloads_total",
            &[("result", "ok")]
        ),
        0.0
    );
}

#[tokio::test]
async fn restart_only_keys_are_reported_and_live_ones_apply() {
    let backend = Gated::start(true, 1).await;
    // No observed model gets its own label: only the configured list does.
    let mut first = pool_of(&[&backend.url]);
    first.metering.max_observed_models = 0;
    let proxy = start_proxy(first.clone()).await;
    let before = client::post(proxy.traffic_addr, CHAT, BODY).await;
    assert_eq!(before.status, 200);
    let mut next = first;
    next.buckets.itl = vec![0.01, 0.02];
    next.metering.models = vec!["m".to_owned()];
    next.server.max_streams = 1;
    let applied = proxy.reload(next).await.expect("applies");
    assert_eq!(applied.restart_required, vec!["buckets"]);
    let text = proxy.metrics.render();
    assert_eq!(
        prom::value(&text, "tokenmeter_config_restart_required", &[]),
        1.0
    );

    let streamed = client::post(proxy.traffic_addr, CHAT, BODY).await;
    assert_eq!(streamed.status, 200);
    let text = proxy.metrics.render();
    assert_eq!(
        prom::sum(
            &text,
            "tokenmeter_requests_total",
            &[("gen_ai_request_model", "other")]
        ),
        1.0,
        "before the reload `m` was `other`, after it `m`"
    );
    assert_eq!(
        prom::sum(
            &text,
            "tokenmeter_requests_total",
            &[("gen_ai_request_model", "m")]
        ),
        1.0,
        "the reloaded model list labels the request"
    );

    // max_streams = 1 applies: with one stream open (held open until the second is answered), a
    // second is refused.
    backend.close();
    let mut open = client::open(proxy.traffic_addr, CHAT, BODY).await;
    let _ = open.next_frame().await;
    let refused = client::post(proxy.traffic_addr, CHAT, BODY).await;
    assert_eq!(
        refused.status, 503,
        "the lowered max_streams refuses the second stream"
    );
    backend.open();
    let held = open.collect().await;
    assert!(held.error.is_none(), "the open stream ran to its end");
}

#[tokio::test]
async fn a_reload_that_points_the_listener_at_other_certificate_files_serves_them() {
    use std::sync::Arc;

    use support::tls::{client_config, Ca, TempDir};
    use tokenmeter::config::ServerTlsConfig;

    let dir = TempDir::new("reload-tls");
    let (old_ca, new_ca) = (Ca::new("old CA"), Ca::new("new CA"));
    let (old_cert, old_key) = old_ca.server().write(&dir, "old");
    let (new_cert, new_key) = new_ca.server().write(&dir, "new");
    let trust_old = Arc::new(client_config(&dir.write("old-ca.crt", &old_ca.pem), None));
    let trust_new = Arc::new(client_config(&dir.write("new-ca.crt", &new_ca.pem), None));
    let backend = Backend::start(vllm(Duration::from_millis(1))).await;
    let with_tls = |cert: &std::path::Path, key: &std::path::Path| {
        let mut config = pool_of(&[&backend.url]);
        config.server.tls = Some(ServerTlsConfig {
            cert: cert.to_owned(),
            key: key.to_owned(),
            client_ca: None,
            reload_interval: Duration::ZERO,
        });
        config
    };
    let proxy = start_proxy(with_tls(&old_cert, &old_key)).await;
    let before = client::open_tls(proxy.traffic_addr, Arc::clone(&trust_old), CHAT, BODY)
        .await
        .collect()
        .await;
    assert_eq!(before.bytes(), fixture("vllm-chat-usage.sse"));

    // A key that does not fit: refused, the old certificate keeps serving.
    let err = proxy
        .reload(with_tls(&new_cert, &old_key))
        .await
        .expect_err("a key of another certificate");
    assert!(err.contains("server.tls.key"), "names the key: {err}");
    let still = client::open_tls(proxy.traffic_addr, Arc::clone(&trust_old), CHAT, BODY)
        .await
        .collect()
        .await;
    assert_eq!(still.status, 200, "the running certificate still serves");

    let applied = proxy
        .reload(with_tls(&new_cert, &new_key))
        .await
        .expect("the new files load");
    assert!(applied.restart_required.is_empty(), "{applied:?}");
    let after = client::open_tls(proxy.traffic_addr, trust_new, CHAT, BODY)
        .await
        .collect()
        .await;
    assert_eq!(
        after.bytes(),
        fixture("vllm-chat-usage.sse"),
        "new connections get the new certificate"
    );
}
