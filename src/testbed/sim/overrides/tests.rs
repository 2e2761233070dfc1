use super::*;

fn parse(text: &str) -> Result<SimOverrides, SimError> {
    SimOverrides::from_toml(text, Path::new("test.toml"))
}

/// The error of a file that must be refused (`why`), as text.
fn parse_error(text: &str, why: &str) -> String {
    parse(text).expect_err(why).to_string()
}

/// The error of resolving flags that must be refused (`why`) over an empty file, as text.
fn flags_error(flags: SimOverrides, why: &str) -> String {
    resolve(&SimOverrides::default(), &flags)
        .expect_err(why)
        .to_string()
}

/// Checks that the error of something refused (`why`) names each of `names`.
fn assert_names(err: &str, why: &str, names: &[&str]) {
    for name in names {
        assert!(err.contains(name), "{why}: the error names {name}: {err}");
    }
}

#[test]
fn file_then_flags_override_the_profile() {
    let file = parse(
        "profile = \"fast\"\nmax_num_seqs = 4\nt_fixed = \"3ms\"\nparams = 2e9\ntime_scale = 3\n",
    )
    .expect("valid overrides");
    let flags = SimOverrides {
        max_num_seqs: Some(9),
        ..SimOverrides::default()
    };
    let config = resolve(&file, &flags).expect("resolves");
    let mut want = SimConfig::profile("fast").expect("fast profile");
    want.max_num_seqs = 9;
    want.t_fixed = Duration::from_millis(3);
    want.params = 2e9;
    want.time_scale = 3.0;
    assert_eq!(
        config, want,
        "flags beat the file, the file beats the profile; integers read as floats"
    );
}

#[test]
fn example_files_resolve() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/sim");
    let file = SimOverrides::from_file(&dir.join("8b-chunked-2k.toml")).expect("example parses");
    let config = resolve(&file, &SimOverrides::default()).expect("example resolves");
    assert_eq!(config.max_num_batched_tokens, 2048, "the example's budget");
    let file =
        SimOverrides::from_file(&dir.join("70b-4xh100-spec-decode.toml")).expect("example parses");
    let config = resolve(&file, &SimOverrides::default()).expect("example resolves");
    assert_eq!(
        (config.tokens_per_chunk, config.t_fixed),
        (3, Duration::from_micros(3500)),
        "spec decode example"
    );
    assert_eq!(
        config.model, "meta-llama/Llama-3.1-70B-Instruct",
        "the file's profile applies"
    );
}

#[test]
fn refused_files_name_what_is_wrong() {
    // (file, why it is refused, what its error must name)
    let cases: [(&str, &str, &[&str]); 3] = [
        ("max_num_seq = 4\n", "a typo", &["max_num_seq", "test.toml"]),
        ("t_fixed = \"soon\"\n", "a bad duration", &["t_fixed"]),
        (
            "kv_transfer_fault = \"sometimes\"\n",
            "an unknown fault",
            &["kv_transfer_fault", "decode"],
        ),
    ];
    for (text, why, names) in cases {
        assert_names(&parse_error(text, why), why, names);
    }
}

#[test]
fn refused_flags_name_what_is_wrong() {
    let profile = SimOverrides {
        profile: Some("gpt-9".to_owned()),
        ..SimOverrides::default()
    };
    let efficiency = SimOverrides {
        eff_compute: Some(0.0),
        ..SimOverrides::default()
    };
    let bandwidth = SimOverrides {
        kv_link_bandwidth: Some(0.0),
        ..SimOverrides::default()
    };
    // (flags, why they are refused, what the error must name: an unknown profile lists the
    // known ones)
    let cases: [(SimOverrides, &str, &[&str]); 3] = [
        (
            profile,
            "an unknown profile",
            &["gpt-9", "llama-3.1-8b-h100"],
        ),
        (efficiency, "a zero efficiency", &["eff_compute"]),
        (bandwidth, "a zero bandwidth", &["kv_link_bandwidth"]),
    ];
    for (flags, why, names) in cases {
        assert_names(&flags_error(flags, why), why, names);
    }
}

#[test]
fn kv_transfer_knobs_from_file_and_flags() {
    let file = parse("kv_link_bandwidth = 5e9\nkv_transfer_fault = \"prefill\"\n")
        .expect("valid overrides");
    let config = resolve(&file, &SimOverrides::default()).expect("resolves");
    assert_eq!(
        (config.kv_link_bandwidth, config.kv_transfer_fault),
        (5e9, KvTransferFault::Prefill),
        "the file sets both"
    );
    let flags = SimOverrides {
        kv_transfer_fault: Some(KvTransferFault::Decode),
        ..SimOverrides::default()
    };
    let config = resolve(&file, &flags).expect("resolves");
    assert_eq!(
        config.kv_transfer_fault,
        KvTransferFault::Decode,
        "the flag beats the file"
    );
    let config = resolve(&SimOverrides::default(), &SimOverrides::default()).expect("default");
    assert_eq!(
        (config.kv_link_bandwidth, config.kv_transfer_fault),
        (25e9, KvTransferFault::None),
        "the default profile's link, no fault"
    );
}

#[test]
fn kv_transfer_flags_parse_on_the_command_line() {
    use clap::Parser;
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        overrides: SimOverrides,
    }
    let cli = Cli::try_parse_from([
        "sim",
        "--kv-link-bandwidth",
        "2.5e10",
        "--kv-transfer-fault",
        "decode",
    ])
    .expect("flags parse");
    assert_eq!(
        (
            cli.overrides.kv_link_bandwidth,
            cli.overrides.kv_transfer_fault
        ),
        (Some(2.5e10), Some(KvTransferFault::Decode)),
        "the flags' names and values"
    );
    assert!(
        Cli::try_parse_from(["sim", "--kv-transfer-fault", "maybe"]).is_err(),
        "an unknown fault is refused"
    );
}
