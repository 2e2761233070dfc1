use super::*;

#[tokio::test]
async fn refused_upstream_is_a_502_json_error() {
    let err = ProxyError::Connect {
        backend: Arc::from("127.0.0.1:1"),
        detail: "connection refused".to_owned(),
        timed_out: false,
    };
    let response = err.to_response();
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY, "status");
    assert_eq!(err.outcome(), Outcome::UpstreamError, "outcome");
    assert_error_json(
        &error_json(response).await,
        "upstream_unavailable",
        502,
        &["127.0.0.1:1"],
        "message names the backend",
    );
}

#[test]
fn timeouts_are_504_and_counted_as_timeouts() {
    let err = ProxyError::ResponseTimeout {
        backend: Arc::from("b"),
        timeout: std::time::Duration::from_secs(1),
    };
    assert_eq!(err.status(), StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(err.outcome(), Outcome::Timeout);
    let too_large = ProxyError::BodyTooLarge { limit: 10 };
    assert_eq!(too_large.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(too_large.outcome(), Outcome::ClientError);
}
