use super::*;

fn invalid_key(text: &str) -> String {
    match Config::from_toml(text) {
        Err(ConfigError::Invalid { key, .. }) => key,
        other => panic!("expected an Invalid error for {text:?}, got {other:?}"),
    }
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
    let err = Config::from_toml("[upstream]\nidle_timout = \"1s\"\n").expect_err("typo rejected");
    let text = err.to_string();
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
    let mut config = Config::default();
    config
        .apply_env(|var| match var {
            ENV_LISTEN => Some("0.0.0.0:8000".to_owned()),
            ENV_ADMIN_LISTEN => Some("0.0.0.0:9464".to_owned()),
            ENV_UPSTREAM => Some("http://10.0.0.1:8001, http://10.0.0.2:8001".to_owned()),
            _ => None,
        })
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
    let mut config = Config::default();
    let err = config
        .apply_env(|var| (var == ENV_UPSTREAM).then(|| "localhost:8001".to_owned()))
        .expect_err("a URL without scheme is rejected");
    assert!(
        err.to_string().contains(ENV_UPSTREAM),
        "message names the variable: {err}"
    );
}
