use super::Skim;

/// Skims one whole value; `None` when the skimmer does not accept it.
fn accepts(json: &str) -> Option<()> {
    let mut skim = Skim::new(json.as_bytes());
    skim.skip()?;
    skim.finish()
}

#[test]
fn accepts_strict_json_of_every_type() {
    for json in [
        r#"{}"#,
        r#" { "a" : [ 1 , -0.5e+3 , true , false , null , "x\n\"\\\/\b\f\r\t\u00e9" ] } "#,
        r#"[[],{},"",0,-0,1E9,12.25]"#,
        "\"héllo 🦀\"",
        r#""\u0041\uFFFF""#,
    ] {
        assert_eq!(accepts(json), Some(()), "{json}");
    }
}

#[test]
fn refuses_what_serde_json_refuses() {
    for json in [
        r#"{"a":1,}"#,
        r#"[1,]"#,
        r#"{"a" 1}"#,
        r#"{a:1}"#,
        r#"01"#,
        r#"1."#,
        r#"1e"#,
        r#"-"#,
        r#"+1"#,
        r#"nul"#,
        r#"True"#,
        "\"tab\there\"",
        r#""\x""#,
        r#""\u12G4""#,
        r#""unterminated"#,
        r#"{"a":1}}"#,
        r#"{"a":1} x"#,
        "\u{feff}{}",
    ] {
        assert_eq!(accepts(json), None, "{json}");
    }
}

#[test]
fn leaves_surrogate_escapes_and_escaped_names_to_serde() {
    // serde_json decodes names and checks surrogates only when it decodes: not the skimmer's call.
    assert_eq!(accepts(r#""\ud83e\udd80""#), None);
    let mut skim = Skim::new(br#"{"\u0061":1}"#);
    skim.enter_object().expect("an object");
    assert_eq!(
        skim.next_member(&mut true),
        None,
        "an escaped name is handed back"
    );
}

#[test]
fn nesting_deeper_than_the_limit_is_handed_back() {
    let depth = super::MAX_DEPTH as usize;
    let fits = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    let deeper = format!("{}{}", "[".repeat(depth + 1), "]".repeat(depth + 1));
    assert_eq!(accepts(&fits), Some(()));
    assert_eq!(accepts(&deeper), None);
}

#[test]
fn reads_member_names_and_value_shapes() {
    let mut skim = Skim::new(br#"{"s":"ab","e":"","a":[ ],"b":[0],"n":null,"x":false}"#);
    skim.enter_object().expect("an object");
    let mut first = true;
    let mut seen = Vec::new();
    while let Some(name) = skim.next_member(&mut first).expect("valid") {
        let shape = match name {
            b"s" | b"e" => skim.skip_is_nonempty_string(),
            b"a" | b"b" => skim.skip_is_nonempty_array(),
            _ => skim.skip_is_non_null(),
        };
        seen.push((
            String::from_utf8_lossy(name).into_owned(),
            shape.expect("valid"),
        ));
    }
    assert_eq!(skim.finish(), Some(()));
    let expected = [
        ("s", true),
        ("e", false),
        ("a", false),
        ("b", true),
        ("n", false),
        ("x", true),
    ];
    let expected: Vec<_> = expected.iter().map(|(n, v)| (n.to_string(), *v)).collect();
    assert_eq!(seen, expected);
}
