use std::time::Duration;

use super::*;

#[test]
fn live_keys_need_no_restart() {
    let running = Config::default();
    let mut new = running.clone();
    new.upstream.urls = vec!["http://10.0.0.9:8000".to_owned()];
    new.upstream.response_timeout = Duration::from_secs(5);
    new.server.max_streams = 10;
    new.metering.models = vec!["m".to_owned()];
    new.routing.retries = 0;
    assert_eq!(
        restart_only_changes(&running, &new),
        Vec::<&str>::new(),
        "backends, timeouts, limits, models and routing apply live"
    );
}

#[test]
fn restart_only_keys_are_named_and_kept_at_their_running_values() {
    let running = Config::default();
    let mut new = running.clone();
    new.server.listen = "127.0.0.1:9999".parse().expect("addr");
    new.server.max_headers = 7;
    new.buckets.ttft = vec![0.5, 1.0];
    new.slo.ttft = Duration::from_millis(500);
    new.upstream.pool_max_idle_per_host = 1;
    assert_eq!(
        restart_only_changes(&running, &new),
        vec![
            "server.listen",
            "server.max_headers",
            "buckets",
            "upstream.pool_max_idle_per_host",
            "slo.ttft (bucket edge)"
        ]
    );
    keep_restart_only(&running, &mut new);
    assert_eq!(
        new.server.listen, running.server.listen,
        "still bound there"
    );
    assert_eq!(new.server.max_headers, running.server.max_headers);
    assert_eq!(new.buckets, running.buckets, "bucket layouts are fixed");
    assert_eq!(new.upstream.pool_max_idle_per_host, 1024);
    assert_eq!(
        new.slo.ttft,
        Duration::from_millis(500),
        "the SLO target itself applies at once"
    );
}

#[test]
fn a_new_class_waits_for_a_restart_only_for_a_new_bucket_edge() {
    let running = Config::default();
    let with_class = |ttft: u64, tpot: Option<u64>| {
        let mut new = running.clone();
        new.slo.classes.insert(
            "batch".to_owned(),
            crate::config::TargetsOverride {
                ttft: Some(Duration::from_millis(ttft)),
                tpot: tpot.map(Duration::from_millis),
                max_gap: None,
            },
        );
        new
    };
    // 800 ms is the default TTFT target, an edge already: the class applies at once.
    assert!(restart_only_changes(&running, &with_class(800, None)).is_empty());
    assert_eq!(
        restart_only_changes(&running, &with_class(800, Some(100))),
        vec!["slo.tpot (bucket edge)"]
    );
    let mut new = with_class(10_000, None);
    assert_eq!(
        restart_only_changes(&running, &new),
        vec!["slo.ttft (bucket edge)"]
    );
    keep_restart_only(&running, &mut new);
    assert_eq!(
        new.slo.targets(None, Some("batch")).ttft,
        Duration::from_secs(10),
        "the class's targets apply at once"
    );
}

#[test]
fn a_new_gap_target_waits_for_a_restart_only_for_its_bucket_edge() {
    let running = Config::default();
    let mut new = running.clone();
    new.slo.max_gap = Some(Duration::from_millis(250));
    assert_eq!(
        restart_only_changes(&running, &new),
        vec!["slo.max_gap (bucket edge)"]
    );
    keep_restart_only(&running, &mut new);
    assert_eq!(
        new.slo.defaults().max_gap,
        Some(Duration::from_millis(250)),
        "the target applies at once"
    );
}

#[test]
fn turning_tls_on_or_off_waits_for_a_restart_but_new_paths_apply() {
    let table = |cert: &str| crate::config::ServerTlsConfig {
        cert: cert.into(),
        key: "/k".into(),
        client_ca: None,
        reload_interval: Duration::from_secs(10),
    };
    let plain = Config::default();
    let mut with_tls = plain.clone();
    with_tls.server.tls = Some(table("/a"));
    assert_eq!(restart_only_changes(&plain, &with_tls), vec!["server.tls"]);
    let mut kept = with_tls.clone();
    keep_restart_only(&plain, &mut kept);
    assert_eq!(kept.server.tls, None, "a plain listener stays plain");

    let mut moved = with_tls.clone();
    moved.server.tls = Some(table("/b"));
    assert_eq!(restart_only_changes(&with_tls, &moved), Vec::<&str>::new());
    keep_restart_only(&with_tls, &mut moved);
    assert_eq!(moved.server.tls, Some(table("/b")), "new files apply live");
}
