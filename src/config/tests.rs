use super::load::ENV_UPSTREAM;
use super::spelling::redacted;
use super::tenants::ENV_UPSTREAM_KEY_FILE;
use super::*;

fn invalid_key(text: &str) -> String {
    match Config::from_toml(text) {
        Err(ConfigError::Invalid { key, .. }) => key,
        other => panic!("expected an Invalid error for {text:?}, got {other:?}"),
    }
}

/// Why `text` is refused (any refusal: serde's or a check's), as the operator reads it.
fn refused(text: &str) -> String {
    match Config::from_toml(text) {
        Err(err) => err.to_string(),
        Ok(_) => panic!("{text} was accepted"),
    }
}

/// The defaults with the environment `vars` (name, value) applied, as the process's would be.
fn defaults_with_env(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let mut config = Config::default();
    config.apply_env(|var| {
        let value = vars.iter().find(|(name, _)| *name == var);
        value.map(|(_, value)| (*value).to_owned())
    })?;
    Ok(config)
}

#[test]
fn shipped_file_equals_defaults() {
    let shipped = Config::from_toml(SHIPPED).expect("the shipped config parses");
    assert_eq!(
        shipped,
        Config::default(),
        "config/tokenmeter.toml must document exactly the built-in defaults"
    );
}

#[test]
fn empty_file_gives_defaults() {
    assert_eq!(
        Config::from_toml("").expect("empty parses"),
        Config::default()
    );
}

#[test]
fn durations_are_human_strings() {
    let config = Config::from_toml("[slo]\nttft = \"1.5s\"\ntpot = \"20ms\"\n").expect("parses");
    assert_eq!(config.slo.ttft, Duration::from_millis(1500), "1.5s");
    assert_eq!(config.slo.tpot, Duration::from_millis(20), "20ms");
}

#[test]
fn unknown_key_is_named_with_its_table() {
    let text = refused("[upstream]\nidle_timout = \"1s\"\n");
    assert!(
        text.contains("idle_timout"),
        "message names the unknown key: {text}"
    );
    assert!(text.contains("upstream"), "message names the table: {text}");
}

#[test]
fn bad_duration_names_the_key() {
    assert_eq!(invalid_key("[slo]\nttft = \"fast\"\n"), "slo.ttft");
    assert_eq!(
        invalid_key("[upstream]\nidle_timeout = 5\n"),
        "upstream.idle_timeout"
    );
}

#[test]
fn bad_values_name_the_key() {
    assert_eq!(invalid_key("[slo]\nttft = \"0s\"\n"), "slo.ttft");
    assert_eq!(invalid_key("[upstream]\nurls = []\n"), "upstream.urls");
    assert_eq!(
        invalid_key("[upstream]\nurls = [\"http://a:1\", \"ftp://b\"]\n"),
        "upstream.urls[1]"
    );
    assert_eq!(invalid_key("[buckets]\nitl = [0.1, 0.05]\n"), "buckets.itl");
    assert_eq!(invalid_key("[buckets]\ntokens = []\n"), "buckets.tokens");
    assert_eq!(
        invalid_key("[server]\nlisten = \"nowhere\"\n"),
        "server.listen"
    );
    assert_eq!(
        invalid_key("[server]\nmax_request_body_bytes = -1\n"),
        "server.max_request_body_bytes"
    );
}

#[test]
fn env_overrides_win_over_the_file() {
    let config = defaults_with_env(&[
        (ENV_LISTEN, "0.0.0.0:8000"),
        (ENV_ADMIN_LISTEN, "0.0.0.0:9464"),
        (ENV_UPSTREAM, "http://10.0.0.1:8001, http://10.0.0.2:8001"),
    ])
    .expect("valid env");
    assert_eq!(config.server.listen, "0.0.0.0:8000".parse().expect("addr"));
    assert_eq!(
        config.server.admin_listen,
        "0.0.0.0:9464".parse().expect("addr")
    );
    assert_eq!(
        config.upstream.urls,
        vec!["http://10.0.0.1:8001", "http://10.0.0.2:8001"],
        "comma-separated upstreams"
    );
}

#[test]
fn bad_env_names_the_variable() {
    let err = defaults_with_env(&[(ENV_UPSTREAM, "localhost:8001")])
        .expect_err("a URL without scheme is rejected");
    assert!(
        err.to_string().contains(ENV_UPSTREAM),
        "message names the variable: {err}"
    );
}

#[test]
fn the_affinity_example_parses_as_documented() {
    let config = Config::from_toml(include_str!("../../config/examples/affinity.toml"))
        .expect("affinity.toml parses");
    assert_eq!(config.pools.len(), 1, "one pool");
    let pool = &config.pools[0];
    assert_eq!(pool.affinity, Affinity::Prefix, "prefix affinity");
    assert_eq!(pool.urls.len(), 4, "four replicas");
    assert_eq!(
        (pool.affinity_load_factor, pool.affinity_load_slack),
        (1.5, 4),
        "the documented bound"
    );
}

#[test]
fn affinity_values_are_checked_by_name() {
    let text = refused("[[pools]]\nname = \"p\"\nurls = [\"http://a:1\"]\naffinity = \"sticky\"\n");
    assert!(
        text.contains("pools[0].affinity") && text.contains("sticky"),
        "{text}"
    );
    let header = Config::from_toml(
        "[[pools]]\nname = \"p\"\nurls = [\"http://a:1\"]\naffinity = \"header:X-Session-Id\"\n",
    )
    .expect("a header affinity");
    assert_eq!(
        header.pools[0].affinity,
        Affinity::Header(http::HeaderName::from_static("x-session-id")),
        "header names are lower-cased"
    );
    let err =
        refused("[[pools]]\nname = \"p\"\nurls = [\"http://a:1\"]\naffinity_load_factor = 0.5\n");
    assert!(err.contains("pools[0].affinity_load_factor"), "{err}");
    let err = refused("[routing]\nprefix_block_bytes = 4\n");
    assert!(err.contains("routing.prefix_block_bytes"), "{err}");
}

#[test]
fn shipped_examples_parse_as_documented() {
    let sidecar = Config::from_toml(include_str!("../../config/examples/sidecar.toml"))
        .expect("sidecar.toml parses");
    let pools = sidecar.effective_pools();
    assert_eq!(pools.len(), 1, "one implicit pool");
    assert_eq!(pools[0].name, DEFAULT_POOL, "named default");
    assert_eq!(
        pools[0].urls,
        vec!["http://127.0.0.1:8001"],
        "the one backend"
    );
    assert!(sidecar.rules.is_empty(), "no rules");

    let split = Config::from_toml(include_str!("../../config/examples/pools.toml"))
        .expect("pools.toml parses");
    let names: Vec<(&str, &str)> = split
        .pools
        .iter()
        .map(|p| (p.name.as_str(), p.urls[0].as_str()))
        .collect();
    assert_eq!(
        names,
        vec![
            ("prefill", "http://127.0.0.1:8101"),
            ("decode", "http://127.0.0.1:8102")
        ],
        "pools and their backends"
    );
    assert_eq!(
        split.pools[0].balance,
        BalanceLoad::PromptTokens,
        "prefill balance"
    );
    assert_eq!(split.rules[0].min_prompt_tokens, Some(2048), "threshold");
    assert_eq!(
        split.rules[0].fallback.as_deref(),
        Some("decode"),
        "fallback"
    );
    assert_eq!(split.rules[1].pool, "decode", "catch-all");

    let hosted = Config::from_toml(include_str!("../../config/examples/hosted-openai.toml"))
        .expect("hosted-openai.toml parses");
    assert_eq!(
        hosted.upstream.urls,
        vec!["https://api.openai.com"],
        "one https:// upstream"
    );
    assert_eq!(
        hosted.upstream.tls,
        UpstreamTlsConfig::default(),
        "the system's roots, SNI from the URL"
    );
}

#[test]
fn tls_mistakes_name_the_key() {
    let cases = [
        ("[upstream.tls]\ncert = \"/c.pem\"\n", "upstream.tls.key"),
        ("[upstream.tls]\nkey = \"/k.pem\"\n", "upstream.tls.cert"),
        ("[upstream.tls]\nca = \"\"\n", "upstream.tls.ca"),
        (
            "[upstream.tls]\nserver_name = \"not a name\"\n",
            "upstream.tls.server_name",
        ),
        ("[server.tls]\ncert = \"/c.pem\"\n", "server.tls"),
        (
            "[server.admin_tls]\ncert = \"\"\nkey = \"/k.pem\"\n",
            "server.admin_tls.cert",
        ),
        (
            "[server.tls]\ncert = \"/c\"\nkey = \"/k\"\nreload_interval = \"soon\"\n",
            "server.tls.reload_interval",
        ),
        (
            "[[pools]]\nname = \"p\"\nurls = [\"https://h\"]\ntls = { cert = \"/c\" }\n",
            "pools[0].tls.key",
        ),
        ("[upstream]\nurls = [\"ftp://h\"]\n", "upstream.urls[0]"),
    ];
    for (text, key) in cases {
        assert_eq!(invalid_key(text), key, "for {text:?}");
    }
    let https = Config::from_toml("[upstream]\nurls = [\"https://api.example.com\"]\n")
        .expect("https:// upstreams are accepted");
    assert_eq!(https.upstream.urls, vec!["https://api.example.com"]);
}

#[test]
fn routing_mistakes_name_the_key() {
    let two = "[[pools]]\nname = \"a\"\nurls = [\"http://x:1\"]\n";
    assert_eq!(
        invalid_key(&format!("{two}[[rules]]\npool = \"b\"\n")),
        "rules[0].pool"
    );
    assert_eq!(
        invalid_key(&format!(
            "{two}[[rules]]\npool = \"a\"\nfallback = \"zz\"\n"
        )),
        "rules[0].fallback"
    );
    assert_eq!(invalid_key(&format!("{two}{two}")), "pools[0].name");
    assert_eq!(invalid_key("[[pools]]\nname = \"a\"\n"), "pools[0]");
    assert_eq!(
        invalid_key("[[pools]]\nname = \"a\"\ndns = \"no-port\"\n"),
        "pools[0].dns"
    );
    assert_eq!(
        invalid_key("[[pools]]\nname = \"a\"\nurls = [\"http://x:1\"]\nbalance = \"fastest\"\n"),
        "pools[0].balance"
    );
    assert_eq!(
        invalid_key("[routing]\neject_base = \"5s\"\neject_max = \"1s\"\n"),
        "routing.eject_max"
    );
    let err = refused("[[rules]]\npool = \"default\"\nmodle = \"x\"\n");
    assert!(err.contains("modle"), "unknown rule key named: {err}");
}

#[test]
fn request_limits_must_admit_something() {
    assert_eq!(
        invalid_key("[server]\nmax_streams = 0\n"),
        "server.max_streams"
    );
    assert_eq!(
        invalid_key("[server]\nmax_connections = 0\n"),
        "server.max_connections"
    );
    assert_eq!(
        invalid_key("[server]\nmax_header_bytes = 4096\n"),
        "server.max_header_bytes",
        "hyper needs an 8 KiB read buffer"
    );
    assert_eq!(
        invalid_key("[server]\nheader_read_timeout = \"0s\"\n"),
        "server.header_read_timeout"
    );
    assert_eq!(
        invalid_key("[server]\nhttp2_max_concurrent_streams = 0\n"),
        "server.http2_max_concurrent_streams"
    );
    let config = Config::from_toml("[server]\nmax_streams = 3\nheader_read_timeout = \"250ms\"\n")
        .expect("parses");
    assert_eq!(config.server.max_streams, 3, "max_streams read");
    assert_eq!(
        config.server.header_read_timeout,
        Duration::from_millis(250),
        "header_read_timeout read"
    );
}

#[test]
fn a_handoff_names_an_existing_prefill_pool_that_runs_its_own_prefills() {
    let pools = |handoff: &str| {
        format!(
            "[[pools]]\nname = \"p\"\nurls = [\"http://a:1\"]\n\n[[pools]]\nname = \"d\"\nurls = [\"http://b:1\"]\n[pools.handoff]\n{handoff}\n"
        )
    };
    let config = Config::from_toml(&pools("prefill_pool = \"p\"")).expect("a handoff");
    let handoff = config.pools[1]
        .handoff
        .as_ref()
        .expect("on the decode pool");
    assert_eq!(
        handoff,
        &HandoffConfig {
            prefill_pool: "p".to_owned(),
            protocol: HandoffProtocol::Vllm,
            min_prompt_tokens: 512,
            short_queue_tokens: 0,
            spill_queue_tokens: 0,
            prefill_timeout: Duration::from_secs(10),
            slot_dir: None,
            slot_wait: Duration::from_millis(200),
        },
        "the defaults"
    );
    for (handoff, key, why) in [
        (
            "prefill_pool = \"p\"\nprotocol = \"llamacpp\"",
            "pools[1].handoff.slot_dir",
            "llama.cpp needs the slot directory",
        ),
        (
            "prefill_pool = \"q\"",
            "pools[1].handoff.prefill_pool",
            "no such pool",
        ),
        (
            "prefill_pool = \"d\"",
            "pools[1].handoff.prefill_pool",
            "not itself",
        ),
        (
            "prefill_pool = \"p\"\nmin_prompt_tokens = 0",
            "pools[1].handoff.min_prompt_tokens",
            "no zero threshold",
        ),
        (
            "prefill_pool = \"p\"\nprefill_timeout = \"0s\"",
            "pools[1].handoff.prefill_timeout",
            "no zero deadline",
        ),
    ] {
        assert_eq!(invalid_key(&pools(handoff)), key, "{why}: {handoff:?}");
    }
    let chained = "[[pools]]\nname = \"p\"\nurls = [\"http://a:1\"]\n[pools.handoff]\nprefill_pool = \"d\"\n\n[[pools]]\nname = \"d\"\nurls = [\"http://b:1\"]\n[pools.handoff]\nprefill_pool = \"p\"\n";
    assert_eq!(
        invalid_key(chained),
        "pools[0].handoff.prefill_pool",
        "a prefill pool must run its prefills"
    );
    let err = refused(&pools("prefill_pool = \"p\"\nprotocol = \"sglang\""));
    assert!(err.contains("pools[1].handoff.protocol"), "{err}");
}

#[test]
fn the_disaggregated_example_parses_as_documented() {
    let config = Config::from_toml(include_str!("../../config/examples/disaggregated.toml"))
        .expect("disaggregated.toml parses");
    let decode = &config.pools[1];
    assert_eq!(decode.name, "decode");
    let handoff = decode.handoff.as_ref().expect("the decode pool hands off");
    assert_eq!(handoff.prefill_pool, "prefill");
    assert_eq!(
        (handoff.min_prompt_tokens, handoff.short_queue_tokens),
        (512, 2048)
    );
    assert!(config.pools[0].handoff.is_none());
}

#[test]
fn the_tenants_example_loads() {
    let config = Config::from_toml(include_str!("../../config/examples/tenants.toml"))
        .expect("the tenants example is valid");
    assert_eq!(
        config.tenants.sources,
        [TenantSource::ApiKey, TenantSource::Header]
    );
    assert_eq!(config.tenants.anonymous, Anonymous::Refuse);
    assert!(config.tenants.enabled());
    for sources in ["[\"header\", \"header\"]", "[\"cookie\"]"] {
        let err = refused(&format!("[tenants]\nsources = {sources}\n"));
        assert!(err.contains("tenants.sources"), "{sources}: {err}");
    }
}

#[test]
fn the_client_cert_source_needs_client_certificates_on_the_traffic_listener() {
    let tls = |client_ca: &str| {
        format!("[server.tls]\ncert = \"/tls/tls.crt\"\nkey = \"/tls/tls.key\"\n{client_ca}")
    };
    let tenants = "[tenants]\nsources = [\"header\", \"client_cert\"]\n";
    let message = |text: &str| match Config::from_toml(text) {
        Err(ConfigError::Invalid { key, message }) => (key, message),
        other => panic!("expected an Invalid error for {text:?}, got {other:?}"),
    };
    let expected = (
        "tenants.sources".to_owned(),
        "client_cert needs [server.tls] with client_ca (client certificates required)".to_owned(),
    );
    assert_eq!(message(tenants), expected, "no [server.tls]");
    assert_eq!(
        message(&format!("{}{tenants}", tls(""))),
        expected,
        "TLS without client certificates"
    );
    let config = Config::from_toml(&format!(
        "{}{tenants}cert_field = \"san_uri\"\n",
        tls("client_ca = \"/tls/ca.crt\"\n")
    ))
    .expect("client certificates required: valid");
    assert_eq!(
        config.tenants.sources,
        [TenantSource::Header, TenantSource::ClientCert]
    );
    assert_eq!(config.tenants.cert_field, CertField::SanUri);
    for (text, field) in [
        ("subject_cn", CertField::SubjectCn),
        ("san_dns", CertField::SanDns),
        ("san_uri", CertField::SanUri),
        ("san_email", CertField::SanEmail),
    ] {
        let config = Config::from_toml(&format!("[tenants]\ncert_field = \"{text}\"\n"))
            .expect("a field name");
        assert_eq!(config.tenants.cert_field, field, "{text}");
        assert_eq!(field.as_str(), text, "spelt as the config spells it");
    }
    assert_eq!(
        invalid_key("[tenants]\ncert_field = \"issuer_cn\"\n"),
        "tenants.cert_field"
    );
}

#[test]
fn the_upstream_key_file_needs_a_source_and_a_path_and_comes_from_the_env_too() {
    assert_eq!(
        invalid_key("[tenants]\nupstream_key_file = \"/keys/backend\"\n"),
        "tenants.upstream_key_file",
        "tenants off: the key would be lent to anyone"
    );
    assert_eq!(
        invalid_key("[tenants]\nsources = [\"header\"]\nupstream_key_file = \"\"\n"),
        "tenants.upstream_key_file",
        "an empty path"
    );
    let config = Config::from_toml(
        "[tenants]\nsources = [\"header\"]\nupstream_key_file = \"/keys/backend\"\n",
    )
    .expect("valid");
    assert_eq!(
        config.tenants.upstream_key_file.as_deref(),
        Some(std::path::Path::new("/keys/backend"))
    );
    let config =
        defaults_with_env(&[(ENV_UPSTREAM_KEY_FILE, " /run/secrets/key ")]).expect("valid env");
    assert_eq!(
        config.tenants.upstream_key_file.as_deref(),
        Some(std::path::Path::new("/run/secrets/key")),
        "the environment's path, trimmed"
    );
    assert_eq!(ENV_UPSTREAM_KEY_FILE, "TOKENMETER_UPSTREAM_KEY_FILE");
}

#[test]
fn a_budget_store_url_never_shows_its_password() {
    assert_eq!(
        redacted("redis://default:s3cret@redis:6379/0"),
        "redis://default:***@redis:6379/0"
    );
    assert_eq!(
        redacted("redis://s3cret@redis:6379"),
        "redis://***@redis:6379"
    );
    assert_eq!(redacted("redis://redis:6379"), "redis://redis:6379");
    let mut config = Config::default();
    config.tenants.budgets.store = "redis://u:s3cret@h:1".to_owned();
    let printed = format!("{config:#?}");
    assert!(
        !printed.contains("s3cret") && printed.contains("redis://u:***@h:1"),
        "serve --check prints the config without the password"
    );
}

#[test]
fn budget_keys_are_checked_and_named() {
    assert!(refused("[tenants.budgets]\nstore = \"http://redis:6379\"")
        .contains("tenants.budgets.store"));
    assert!(refused("[tenants.budgets.default]\ntokens_per_minute = 0")
        .contains("tenants.budgets.default.tokens_per_minute"));
    assert!(
        refused("[tenants.budgets.tenant.\"team-a\"]\nconcurrent_streams = 0")
            .contains("tenants.budgets.tenant.\"team-a\".concurrent_streams")
    );
    assert!(refused("[tenants.budgets.default]\ncounts = \"both\"").contains("counts"));
    assert!(refused("[tenants.budgets.default]\ntokens_per_hour = 5").contains("tokens_per_hour"));
    let err = defaults_with_env(&[(ENV_BUDGET_STORE, "http://x")])
        .expect_err("a store URL from the environment is checked too");
    assert!(err.to_string().contains("TOKENMETER_BUDGET_STORE"), "{err}");
    let config = defaults_with_env(&[(ENV_BUDGET_STORE, " redis://h:6379 ")]).expect("a redis URL");
    assert_eq!(
        config.tenants.budgets.store_url(),
        StoreUrl::Redis("redis://h:6379".to_owned())
    );
    let limits: Config = Config::from_toml(
        "[tenants.budgets.default]\ntokens_per_day = 5\n[tenants.budgets.tenant.big]\ntokens_per_day = 50",
    )
    .expect("valid");
    let budgets = &limits.tenants.budgets;
    assert!(budgets.enabled());
    assert_eq!(
        budgets.limits_for("big").and_then(|l| l.tokens_per_day),
        Some(50)
    );
    assert_eq!(
        budgets.limits_for("small").and_then(|l| l.tokens_per_day),
        Some(5)
    );
}

#[test]
fn slo_balancing_and_its_memory_parse_and_a_memory_under_two_is_named() {
    let config = Config::from_toml(
        "[routing]\nprediction_memory = 50\n[[pools]]\nname = \"p\"\nurls = [\"http://127.0.0.1:1\"]\nbalance = \"slo\"\n",
    )
    .expect("parses");
    assert_eq!(config.routing.prediction_memory, 50);
    assert_eq!(config.pools[0].balance, BalanceLoad::Slo);
    assert_eq!(
        invalid_key("[routing]\nprediction_memory = 1\n"),
        "routing.prediction_memory"
    );
}

#[test]
fn a_pool_queue_parses_and_needs_slo_balancing_and_room() {
    let pool = "[[pools]]\nname = \"p\"\nurls = [\"http://127.0.0.1:1\"]\n";
    let config = Config::from_toml(&format!(
        "{pool}balance = \"slo\"\n[pools.queue]\ncapacity = 8\non_deadline = \"send\"\npriority_header = \"X-Priority\"\n"
    ))
    .expect("parses");
    let queue = config.pools[0].queue.as_ref().expect("a queue");
    assert_eq!(queue.capacity, 8);
    assert_eq!(queue.on_deadline, crate::config::OnDeadline::Send);
    assert!(!queue.equal_shares, "off by default");
    assert_eq!(
        queue.priority_header.as_ref().map(http::HeaderName::as_str),
        Some("x-priority")
    );
    assert_eq!(queue.tenant_header, None);
    assert_eq!(
        invalid_key(&format!("{pool}balance = \"streams\"\n[pools.queue]\n")),
        "pools[0].queue"
    );
    assert_eq!(
        invalid_key(&format!(
            "{pool}balance = \"slo\"\n[pools.queue]\ncapacity = 0\n"
        )),
        "pools[0].queue.capacity"
    );
    let bad_header = refused(&format!(
        "{pool}balance = \"slo\"\n[pools.queue]\ntenant_header = \"a b\"\n"
    ));
    assert!(bad_header.contains("tenant_header"), "{bad_header}");
}

#[test]
fn a_pools_autoscale_parses_makes_auto_place_by_slo_and_names_each_bad_key() {
    // One backend (a sidecar): `auto` would balance by streams, but the signal needs `slo`.
    let pool = "[[pools]]\nname = \"p\"\nurls = [\"http://127.0.0.1:1\"]\n";
    let config = Config::from_toml(&format!(
        "{pool}[pools.autoscale]\nheadroom = 1.5\nmax_replicas = 12\nwindow = \"30s\"\ncold_start = \"2m\"\n"
    ))
    .expect("parses");
    let autoscale = config.pools[0].autoscale.as_ref().expect("a table");
    assert_eq!(autoscale.headroom, 1.5);
    assert_eq!(autoscale.min_replicas, 1);
    assert_eq!(autoscale.max_replicas, 12);
    assert_eq!(autoscale.window, std::time::Duration::from_secs(30));
    assert_eq!(
        autoscale.scale_down_after,
        std::time::Duration::from_secs(300)
    );
    assert_eq!(autoscale.cold_start, std::time::Duration::from_secs(120));
    assert_eq!(autoscale.tolerance, 0.1);
    assert_eq!(config.pools[0].resolve_balance(false), BalanceLoad::Slo);
    let bad = |table: &str| invalid_key(&format!("{pool}[pools.autoscale]\n{table}\n"));
    assert_eq!(bad("tolerance = -0.1"), "pools[0].autoscale.tolerance");
    assert_eq!(bad("tolerance = 1.5"), "pools[0].autoscale.tolerance");
    assert_eq!(bad("cold_start = \"2h\""), "pools[0].autoscale.cold_start");
    assert_eq!(bad("headroom = 0.8"), "pools[0].autoscale.headroom");
    assert_eq!(bad("headroom = 11.0"), "pools[0].autoscale.headroom");
    assert_eq!(bad("min_replicas = 0"), "pools[0].autoscale.min_replicas");
    assert_eq!(
        bad("min_replicas = 4\nmax_replicas = 3"),
        "pools[0].autoscale.max_replicas"
    );
    assert_eq!(bad("window = \"0s\""), "pools[0].autoscale.window");
    assert_eq!(bad("objective = 1.0"), "pools[0].autoscale.objective");
    assert_eq!(bad("objective = 0.2"), "pools[0].autoscale.objective");
    assert_eq!(
        invalid_key(&format!("{pool}balance = \"streams\"\n[pools.autoscale]\n")),
        "pools[0].autoscale"
    );
    let unknown = refused(&format!("{pool}[pools.autoscale]\nreplicas = 3\n"));
    assert!(unknown.contains("replicas"), "{unknown}");
}

#[test]
fn prefill_heavy_is_auto_in_an_slo_pool_off_on_request_and_refused_elsewhere() {
    let pool = "[[pools]]\nname = \"p\"\nurls = [\"http://127.0.0.1:1\"]\n";
    let auto = Config::from_toml(&format!("{pool}balance = \"slo\"\n")).expect("parses");
    assert_eq!(auto.pools[0].prefill_heavy, None);
    assert!(auto.pools[0].designates(), "auto by default in an slo pool");
    let off = Config::from_toml(&format!(
        "{pool}balance = \"slo\"\nprefill_heavy = \"off\"\n"
    ))
    .expect("parses");
    assert_eq!(
        off.pools[0].prefill_heavy,
        Some(crate::config::PrefillHeavy::Off)
    );
    assert!(!off.pools[0].designates());
    let streams = Config::from_toml(&format!("{pool}balance = \"streams\"\n")).expect("parses");
    assert!(
        !streams.effective_pools()[0].designates(),
        "only an slo pool designates"
    );
    assert_eq!(
        invalid_key(&format!(
            "{pool}balance = \"streams\"\nprefill_heavy = \"auto\"\n"
        )),
        "pools[0].prefill_heavy"
    );
    let unknown = refused(&format!(
        "{pool}balance = \"slo\"\nprefill_heavy = \"always\"\n"
    ));
    assert!(unknown.contains("prefill_heavy"), "{unknown}");
}

#[test]
fn balance_auto_places_by_prediction_where_there_is_a_choice() {
    let balance = |text: &str| {
        let config = Config::from_toml(text).unwrap_or_else(|err| panic!("{text}: {err}"));
        config
            .effective_pools()
            .iter()
            .map(|pool| (pool.name.clone(), pool.balance, pool.designates()))
            .collect::<Vec<_>>()
    };
    let one = "[[pools]]\nname = \"one\"\nurls = [\"http://a:1\"]\n";
    let two = "[[pools]]\nname = \"two\"\nurls = [\"http://a:1\", \"http://b:1\"]\n";
    let dns = "[[pools]]\nname = \"dns\"\ndns = \"vllm.ns.svc:8000\"\n";
    assert_eq!(
        balance(&format!("{one}{two}{dns}")),
        [
            ("one".to_owned(), BalanceLoad::Streams, false),
            ("two".to_owned(), BalanceLoad::Slo, true),
            ("dns".to_owned(), BalanceLoad::Slo, true),
        ],
        "one backend: nothing to choose; several, or as many as DNS gives: slo, designating"
    );
    assert_eq!(
        balance(&format!("{one}[pools.queue]\n")),
        [("one".to_owned(), BalanceLoad::Slo, true)],
        "a queue asks for slo"
    );
    assert_eq!(
        balance(&format!("{two}affinity = \"header:x-session-id\"\n")),
        [("two".to_owned(), BalanceLoad::Streams, false)],
        "a session header's home is kept by streams, which slo would not keep"
    );
    assert_eq!(
        balance(&format!("{two}affinity = \"prefix\"\n")),
        [("two".to_owned(), BalanceLoad::Slo, true)],
        "slo weighs the prefix index's cached tokens"
    );
    assert_eq!(
        balance(&format!("{two}balance = \"streams\"\n")),
        [("two".to_owned(), BalanceLoad::Streams, false)],
        "a balance given is kept"
    );
    let handoff = format!(
        "{two}[pools.handoff]\nprefill_pool = \"prefill\"\n\
         [[pools]]\nname = \"prefill\"\nurls = [\"http://p:1\", \"http://p:2\"]\n"
    );
    assert_eq!(
        balance(&handoff),
        [
            ("two".to_owned(), BalanceLoad::Slo, false),
            ("prefill".to_owned(), BalanceLoad::PromptTokens, false),
        ],
        "a handoff's prefill pool queues prompt tokens; its decode pool places, without designating"
    );
    let mut sidecar = Config::default();
    sidecar.upstream.urls = vec!["http://a:1".into(), "http://b:1".into()];
    assert_eq!(sidecar.effective_pools()[0].balance, BalanceLoad::Slo);
    assert_eq!(Config::default().pools.len(), 0);
    assert_eq!(
        Config::default().effective_pools()[0].balance,
        BalanceLoad::Streams,
        "the shipped default: one upstream"
    );
}

/// `tokenmeter.toml` of a Kubernetes ConfigMap: the block scalar under the key, dedented.
fn configmap_toml(manifest: &str) -> String {
    let mut lines = manifest
        .lines()
        .skip_while(|line| !line.trim_end().ends_with("tokenmeter.toml: |"));
    let key = lines
        .next()
        .expect("the ConfigMap has a tokenmeter.toml key");
    let key_indent = key.len() - key.trim_start().len();
    let body: Vec<&str> = lines
        .take_while(|line| {
            line.trim().is_empty() || line.len() - line.trim_start().len() > key_indent
        })
        .collect();
    let indent = body
        .iter()
        .filter(|line| !line.trim().is_empty())
        .map(|line| line.len() - line.trim_start().len())
        .min()
        .unwrap_or(0);
    body.iter()
        .map(|line| line.get(indent..).unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every config the repository ships, by name.
fn shipped_configs() -> Vec<(&'static str, String)> {
    let mut configs: Vec<(&'static str, String)> = vec![
        ("config/tokenmeter.toml", SHIPPED.to_owned()),
        (
            "config/examples/affinity.toml",
            include_str!("../../config/examples/affinity.toml").to_owned(),
        ),
        (
            "config/examples/disaggregated.toml",
            include_str!("../../config/examples/disaggregated.toml").to_owned(),
        ),
        (
            "config/examples/hosted-openai.toml",
            include_str!("../../config/examples/hosted-openai.toml").to_owned(),
        ),
        (
            "config/examples/pools.toml",
            include_str!("../../config/examples/pools.toml").to_owned(),
        ),
        (
            "config/examples/sidecar.toml",
            include_str!("../../config/examples/sidecar.toml").to_owned(),
        ),
        (
            "config/examples/tenants.toml",
            include_str!("../../config/examples/tenants.toml").to_owned(),
        ),
    ];
    for (name, manifest) in [
        (
            "deploy/kubernetes/sidecar/configmap.yaml",
            include_str!("../../deploy/kubernetes/sidecar/configmap.yaml"),
        ),
        (
            "deploy/kubernetes/gateway/configmap.yaml",
            include_str!("../../deploy/kubernetes/gateway/configmap.yaml"),
        ),
        (
            "deploy/kubernetes/gateway-redis/configmap.yaml",
            include_str!("../../deploy/kubernetes/gateway-redis/configmap.yaml"),
        ),
    ] {
        configs.push((name, configmap_toml(manifest)));
    }
    configs
}

/// A config with every optional key set and every enum off its default, so that each field's
/// printing is exercised.
const EVERY_KEY: &str = r#"
[server]
listen = "0.0.0.0:8000"
admin_listen = "[::1]:9464"
shutdown_grace = "1m 30s"
header_read_timeout = "2s 500ms"
[server.tls]
cert = "/tls/tls.crt"
key = "/tls/tls.key"
client_ca = "/tls/ca.crt"
reload_interval = "0s"
[server.admin_tls]
cert = "/tls/admin.crt"
key = "/tls/admin.key"

[upstream]
urls = ["http://a:1", "https://b:2"]
total_timeout = "10m"
[upstream.tls]
ca = "/tls/upstream-ca.crt"
cert = "/tls/client.crt"
key = "/tls/client.key"
server_name = "backend.internal"

[metering]
models = ["m1", "m2"]
stall_threshold = "750us"

[slo]
ttft = "1s"
tpot = "20ms"
class_header = "X-Class"
[slo.models."llama-3.1-70b"]
ttft = "2s"
[slo.classes.batch]
ttft = "10s"
tpot = "100ms"

[routing]
model_tokens_per_byte = { "code-model" = 0.33 }
tokenize = false

[[pools]]
name = "prefill"
urls = ["http://p:1"]
balance = "prompt_tokens"
affinity = "header:X-Session-Id"
tls = { ca = "/tls/pool-ca.crt" }

[[pools]]
name = "decode"
dns = "decode.ns.svc:8000"
balance = "slo"
affinity = "prefix"
health_check = "5s"
scrape_metrics = "2s"
[pools.handoff]
prefill_pool = "prefill"
protocol = "llamacpp"
slot_dir = "/slots"
slot_wait = "1s"
[pools.queue]
on_deadline = "send"
priority_header = "x-priority"
tenant_header = "x-team"
equal_shares = true

[[rules]]
pool = "prefill"
min_prompt_tokens = 2048
model = "meta-llama/*"
path = "/v1/*"
fallback = "decode"
spill_queue_tokens = 65536

[[rules]]
pool = "decode"

[tracing]
endpoint = "http://collector:4317"
protocol = "grpc"
sampler = "parentbased_always_off"
sample_ratio = 0.25
service_name = "gateway"
export_timeout = "3s"
server_timing = true
[tracing.resource_attributes]
"deployment.environment" = "test"

[tenants]
sources = ["client_cert", "api_key", "header"]
keys_file = "/keys/keys"
cert_field = "san_uri"
upstream_key_file = "/backend/key"
anonymous = "refuse"
tracked = ["search"]
[tenants.usage]
path = "-"
[tenants.budgets]
store = "redis://redis:6379/0"
on_store_error = "deny"
[tenants.budgets.default]
counts = "output"
tokens_per_minute = 1000
tokens_per_day = 100000
requests_per_minute = 60
concurrent_streams = 4
[tenants.budgets.tenant."team-a"]
tokens_per_day = 5
"#;

#[test]
fn the_printed_config_reads_back_to_the_same_config() {
    let mut configs = shipped_configs();
    configs.push(("EVERY_KEY", EVERY_KEY.to_owned()));
    for (name, text) in configs {
        let config = Config::from_toml(&text).unwrap_or_else(|err| panic!("{name} parses: {err}"));
        let printed = config
            .to_toml()
            .unwrap_or_else(|err| panic!("{name} prints: {err}"));
        let again = Config::from_toml(&printed)
            .unwrap_or_else(|err| panic!("{name}: the printed config parses: {err}\n{printed}"));
        assert_eq!(
            again, config,
            "{name}: printed and read back, the same config:\n{printed}"
        );
        assert_eq!(
            again.to_toml().expect("prints"),
            printed,
            "{name}: printing is stable"
        );
    }
}

#[test]
fn the_printed_config_holds_the_environments_values() {
    let config = defaults_with_env(&[
        (ENV_LISTEN, "0.0.0.0:8080"),
        (ENV_UPSTREAM, "http://vllm:8000,http://vllm-2:8000"),
        (tracing::OTEL_ENDPOINT, "http://otel:4318"),
    ])
    .expect("valid environment");
    let printed = config.to_toml().expect("prints");
    assert!(printed.contains("listen = \"0.0.0.0:8080\""), "{printed}");
    assert!(
        printed.contains("urls = [\"http://vllm:8000\", \"http://vllm-2:8000\"]"),
        "{printed}"
    );
    assert!(
        printed.contains("endpoint = \"http://otel:4318/v1/traces\""),
        "{printed}"
    );
    assert_eq!(
        Config::from_toml(&printed).expect("parses"),
        config,
        "read back"
    );
}

#[test]
fn durations_print_as_the_human_strings_the_config_reads() {
    let printed = Config::from_toml(EVERY_KEY)
        .expect("parses")
        .to_toml()
        .expect("prints");
    for line in [
        "ttft = \"800ms\"\n",
        "ttft = \"10s\"\n",
        "shutdown_grace = \"1m 30s\"\n",
        "header_read_timeout = \"2s 500ms\"\n",
        "total_timeout = \"10m\"\n",
        "stall_threshold = \"750us\"\n",
        "reload_interval = \"0s\"\n",
        "stream_lease = \"15m\"\n",
    ] {
        if line.starts_with("ttft = \"800ms\"") {
            let default = Config::default().to_toml().expect("prints");
            assert!(
                default.contains(line),
                "the default's {line:?} in:\n{default}"
            );
            continue;
        }
        assert!(printed.contains(line), "{line:?} in:\n{printed}");
    }
    assert!(
        !printed.contains("secs") && !printed.contains("nanos"),
        "no serde Duration tables: {printed}"
    );
}

#[test]
fn the_printed_config_hides_every_secret() {
    let text = r#"
[upstream]
urls = ["http://user:upstream-pass@vllm:8000"]
[[pools]]
name = "hosted"
urls = ["https://apikey:pool-pass@api.example.com"]
[tracing]
endpoint = "http://otel:collector-pass@collector:4318/v1/traces"
headers = { "x-api-key" = "header-secret", authorization = "Bearer header-token" }
[tenants]
sources = ["api_key"]
keys_file = "/etc/tokenmeter/keys/keys"
upstream_key_file = "/etc/tokenmeter/backend/key"
[tenants.budgets]
store = "redis://default:redis-pass@redis:6379/0"
"#;
    let config = Config::from_toml(text).expect("parses");
    let printed = config.to_toml().expect("prints");
    for secret in [
        "upstream-pass",
        "pool-pass",
        "collector-pass",
        "header-secret",
        "header-token",
        "redis-pass",
    ] {
        assert!(
            !printed.contains(secret),
            "{secret} is not printed:\n{printed}"
        );
    }
    for shown in [
        "\"http://user:***@vllm:8000\"",
        "\"https://apikey:***@api.example.com\"",
        "endpoint = \"http://otel:***@collector:4318/v1/traces\"",
        "x-api-key = \"***\"",
        "authorization = \"***\"",
        "store = \"redis://default:***@redis:6379/0\"",
        // Paths are not secrets: the operator needs them to find what failed.
        "keys_file = \"/etc/tokenmeter/keys/keys\"",
        "upstream_key_file = \"/etc/tokenmeter/backend/key\"",
    ] {
        assert!(printed.contains(shown), "{shown} in:\n{printed}");
    }
    let again = Config::from_toml(&printed).expect("the redacted config still parses");
    assert_eq!(
        again.tenants.budgets.store,
        "redis://default:***@redis:6379/0"
    );
    assert_eq!(
        redacted("http://h:1/a@b"),
        "http://h:1/a@b",
        "an @ in the path is no user"
    );
    assert_eq!(redacted("memory"), "memory");
}

/// The tables whose keys are names the operator chooses (models, classes, tenants, headers),
/// not fields: any key is taken there.
const NAMED_TABLES: [&str; 6] = [
    "routing.model_tokens_per_byte",
    "slo.models",
    "slo.classes",
    "tracing.headers",
    "tracing.resource_attributes",
    "tenants.budgets.tenant",
];

/// Calls `visit` with each table of `table` (an array's tables each) and its dotted path (array
/// indices left out), the tables within it first.
fn each_table(path: &str, table: &mut toml::Table, visit: &mut dyn FnMut(&str, &mut toml::Table)) {
    for (key, value) in table.iter_mut() {
        let child = if path.is_empty() {
            key.clone()
        } else {
            format!("{path}.{key}")
        };
        match value {
            toml::Value::Table(inner) => each_table(&child, inner, visit),
            toml::Value::Array(items) => {
                for item in items.iter_mut() {
                    if let toml::Value::Table(inner) = item {
                        each_table(&child, inner, visit);
                    }
                }
            }
            _ => {}
        }
    }
    visit(path, table);
}

/// An unknown key is refused in every table of the config (each struct has
/// `deny_unknown_fields`), so a key a document names but the config does not know fails the
/// parse (tests/e2e/docs_config.rs relies on it).
#[test]
fn every_table_refuses_an_unknown_key() {
    let printed = Config::from_toml(EVERY_KEY)
        .expect("parses")
        .to_toml()
        .expect("prints");
    let mut document: toml::Table = toml::from_str(&printed).expect("TOML");
    let mut paths = Vec::new();
    each_table("", &mut document, &mut |path, _| {
        paths.push(path.to_owned())
    });
    let mut checked = 0;
    for path in paths {
        // A named entry's own table (`[slo.models."m"]`) has fields again, and is checked.
        if NAMED_TABLES.contains(&path.as_str()) {
            continue;
        }
        let mut copy = document.clone();
        each_table("", &mut copy, &mut |at, table| {
            if at == path {
                table.insert("no_such_key".to_owned(), toml::Value::Boolean(true));
            }
        });
        let text = toml::to_string(&copy).expect("TOML");
        let err = refused(&text);
        assert!(
            err.contains("no_such_key"),
            "[{path}]: the refusal names the key: {err}"
        );
        checked += 1;
    }
    assert!(
        checked >= 20,
        "every struct table of EVERY_KEY was checked ({checked})"
    );
}

#[test]
fn a_store_over_tls_or_a_cluster_is_checked_and_named() {
    let tls = "[tenants.budgets]\nstore = \"rediss://redis:6380/0\"\n[tenants.budgets.store_tls]\n";
    let accepted = Config::from_toml(&format!(
        "{tls}ca = \"/ca.crt\"\ncert = \"/c.crt\"\nkey = \"/c.key\""
    ))
    .expect("a rediss store with its files");
    assert_eq!(
        accepted.tenants.budgets.store_tls.ca.as_deref(),
        Some(std::path::Path::new("/ca.crt"))
    );
    assert!(refused(&format!("{tls}cert = \"/c.crt\"")).contains("tenants.budgets.store_tls.key"));
    assert!(refused(&format!("{tls}key = \"/c.key\"")).contains("tenants.budgets.store_tls.cert"));
    assert!(refused(&format!("{tls}ca = \"\"")).contains("tenants.budgets.store_tls.ca"));
    assert!(refused(&format!("{tls}server_name = \"x\"")).contains("server_name"));
    assert!(refused(
        "[tenants.budgets]\nstore = \"redis://redis:6379\"\n[tenants.budgets.store_tls]\nca = \"/ca.crt\""
    )
    .contains("tenants.budgets.store_tls"));

    let seeds = "store = \"redis://a:7000,redis://b:7001\"";
    assert!(refused(&format!("[tenants.budgets]\n{seeds}")).contains("store_cluster = true"));
    let cluster = Config::from_toml(&format!("[tenants.budgets]\n{seeds}\nstore_cluster = true"))
        .expect("a cluster's seeds");
    assert!(cluster.tenants.budgets.store_cluster);
    assert!(refused(
        "[tenants.budgets]\nstore = \"redis://a:7000,rediss://b:7001\"\nstore_cluster = true"
    )
    .contains("all TLS or none"));
    assert!(refused("[tenants.budgets]\nstore_cluster = true").contains("store_cluster"));
}
