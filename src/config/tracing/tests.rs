use std::collections::HashMap;

use super::*;
use crate::config::Config;

fn env(pairs: &[(&'static str, &str)]) -> impl Fn(&'static str) -> Option<String> {
    let map: HashMap<&'static str, String> =
        pairs.iter().map(|(k, v)| (*k, (*v).to_owned())).collect();
    move |var| map.get(var).cloned()
}

fn resolved(file: &str, pairs: &[(&'static str, &str)]) -> Result<Config, ConfigError> {
    let mut config = Config::from_toml(file)?;
    config.apply_env(env(pairs))?;
    Ok(config)
}

#[test]
fn off_by_default_and_with_an_empty_endpoint() {
    assert_eq!(Config::default().tracing.export(), None, "no endpoint: off");
    let config = resolved(
        "[tracing]\nendpoint = \"\"\n",
        &[(OTEL_ENDPOINT, "http://collector:4318")],
    )
    .unwrap();
    assert_eq!(config.tracing.export(), None, "the file's \"\" wins");
}

#[test]
fn the_standard_variables_turn_it_on() {
    let config = resolved(
        "",
        &[
            (OTEL_ENDPOINT, "http://collector:4318/"),
            (OTEL_SERVICE_NAME, "gateway"),
            (
                OTEL_RESOURCE_ATTRIBUTES,
                "deployment.environment=prod,k8s.pod.name=a%2Cb",
            ),
            (OTEL_TRACES_SAMPLER, "parentbased_traceidratio"),
            (OTEL_TRACES_SAMPLER_ARG, "0.01"),
            (OTEL_TIMEOUT, "2500"),
        ],
    )
    .unwrap();
    let export = config.tracing.export().expect("on");
    assert_eq!(
        export.endpoint, "http://collector:4318/v1/traces",
        "HTTP base + signal path"
    );
    assert_eq!(
        export.protocol,
        OtlpProtocol::HttpProtobuf,
        "OpenTelemetry's default"
    );
    assert_eq!(export.service_name, "gateway");
    assert_eq!(
        export.resource,
        vec![
            ("deployment.environment".to_owned(), "prod".to_owned()),
            ("k8s.pod.name".to_owned(), "a,b".to_owned()),
        ],
        "percent-decoded"
    );
    assert_eq!(export.timeout, Duration::from_millis(2500));
    assert_eq!(config.tracing.sampler(), Sampler::ParentbasedTraceidratio);
    assert_eq!(config.tracing.ratio(), 0.01);
}

#[test]
fn the_signal_endpoint_is_used_as_it_is_and_grpc_takes_the_base() {
    let config = resolved(
        "",
        &[
            (OTEL_TRACES_ENDPOINT, "http://collector:4318/custom/path"),
            (OTEL_ENDPOINT, "http://ignored:4318"),
        ],
    )
    .unwrap();
    assert_eq!(
        config.tracing.export().unwrap().endpoint,
        "http://collector:4318/custom/path"
    );
    let config = resolved(
        "",
        &[
            (OTEL_PROTOCOL, "grpc"),
            (OTEL_ENDPOINT, "http://collector:4317"),
        ],
    )
    .unwrap();
    let export = config.tracing.export().unwrap();
    assert_eq!(
        (export.protocol, export.endpoint.as_str()),
        (OtlpProtocol::Grpc, "http://collector:4317")
    );
}

#[test]
fn the_file_wins_where_both_are_given() {
    let file = "[tracing]\nendpoint = \"http://agent:4317\"\nprotocol = \"grpc\"\n\
                service_name = \"from-file\"\nsample_ratio = 0.5\n\
                [tracing.resource_attributes]\n\"deployment.environment\" = \"staging\"\n";
    let config = resolved(
        file,
        &[
            (OTEL_ENDPOINT, "http://collector:4318"),
            (OTEL_PROTOCOL, "http/protobuf"),
            (OTEL_SERVICE_NAME, "from-env"),
            (OTEL_TRACES_SAMPLER_ARG, "0.9"),
            (
                OTEL_RESOURCE_ATTRIBUTES,
                "deployment.environment=prod,team=llm",
            ),
        ],
    )
    .unwrap();
    let export = config.tracing.export().unwrap();
    assert_eq!(export.endpoint, "http://agent:4317");
    assert_eq!(export.protocol, OtlpProtocol::Grpc);
    assert_eq!(export.service_name, "from-file");
    assert_eq!(config.tracing.ratio(), 0.5);
    assert_eq!(
        export.resource,
        vec![
            ("deployment.environment".to_owned(), "staging".to_owned()),
            ("team".to_owned(), "llm".to_owned()),
        ]
    );
}

#[test]
fn sdk_disabled_keeps_the_environment_endpoint_off() {
    let config = resolved(
        "",
        &[
            (OTEL_ENDPOINT, "http://collector:4318"),
            (OTEL_SDK_DISABLED, "true"),
        ],
    )
    .unwrap();
    assert_eq!(config.tracing.export(), None);
}

/// Environment variables and their values.
type Env<'a> = &'a [(&'static str, &'a str)];

#[test]
fn bad_values_name_their_key_or_variable() {
    let cases: [(&str, Env<'_>, &str); 9] = [
        (
            "[tracing]\nendpoint = \"collector:4317\"\n",
            &[],
            "tracing.endpoint",
        ),
        (
            "[tracing]\nendpoint = \"https://collector:4317\"\n",
            &[],
            "tracing.endpoint",
        ),
        (
            "[tracing]\nsample_ratio = 1.5\n",
            &[],
            "tracing.sample_ratio",
        ),
        (
            "[tracing]\nmax_queue_spans = 0\n",
            &[],
            "tracing.max_queue_spans",
        ),
        (
            "[tracing]\nprotocol = \"http/json\"\n",
            &[],
            "tracing.protocol",
        ),
        (
            "[tracing.headers]\n\"bad header\" = \"x\"\n",
            &[],
            "tracing.headers.bad header",
        ),
        (
            "",
            &[(OTEL_TRACES_SAMPLER, "jaeger_remote")],
            OTEL_TRACES_SAMPLER,
        ),
        (
            "",
            &[(OTEL_TRACES_SAMPLER_ARG, "2")],
            OTEL_TRACES_SAMPLER_ARG,
        ),
        ("", &[(OTEL_ENDPOINT, "ftp://collector")], OTEL_ENDPOINT),
    ];
    for (file, pairs, key) in cases {
        let err = resolved(file, pairs).expect_err(key).to_string();
        assert!(err.contains(key), "{key}: {err}");
    }
}
