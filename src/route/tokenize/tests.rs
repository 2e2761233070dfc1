use super::*;

#[test]
fn counts_from_every_server_shape() {
    assert_eq!(
        count(br#"{"count":7,"max_model_len":8192,"tokens":[1,2,3,4,5,6,7]}"#),
        Some(7),
        "vLLM: count"
    );
    assert_eq!(
        count(br#"{"tokens":[259,299,328]}"#),
        Some(3),
        "llama.cpp: tokens"
    );
    assert_eq!(
        count(
            br#"[{"id":1,"text":"a","start":0,"stop":1},{"id":2,"text":"b","start":1,"stop":2}]"#
        ),
        Some(2),
        "TGI: a list of tokens"
    );
    assert_eq!(count(br#"{"error":"x"}"#), None, "no count");
    assert_eq!(count(b"not json"), None, "not JSON");
}

#[test]
fn one_body_names_every_server_field() {
    let body = body(Some("m"), "a \"b\"");
    let value: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
    for field in ["prompt", "content", "inputs"] {
        assert_eq!(value[field], "a \"b\"", "{field} carries the text");
    }
    assert_eq!(value["model"], "m", "the request's model");
    assert_eq!(value["add_special_tokens"], false, "vLLM: text only");
    assert_eq!(value["add_special"], false, "llama.cpp: text only");
    let unnamed = super::body(None, "x");
    assert!(
        !String::from_utf8_lossy(&unnamed).contains("model"),
        "no model member when the request named none"
    );
}
