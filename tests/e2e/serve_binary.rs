//! The real binary: `tokenmeter serve` configured by environment, drained by SIGTERM, and refusing a
//! bad config with the key named.

use crate::support;
use crate::support::otlp;
use std::process::{Command, Stdio};
use std::time::Duration;

use support::backend::{replay, Backend, Script};
use support::ports::free_port;
use support::{client, events_of, fixture};
use tokenmeter::config::Config;

const BIN: &str = env!("CARGO_BIN_EXE_tokenmeter");

/// How long a test waits for the binary to do what it does at once (start, apply a reload): the
/// bound only turns a hang into a failure, and is seconds so that a debug binary on a loaded 2-core
/// machine never reaches it.
const PATIENCE: Duration = Duration::from_secs(20);

/// Waits (at most [`PATIENCE`]) until the binary's admin port answers `/readyz` with 200.
async fn wait_ready(admin_addr: std::net::SocketAddr) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while tokio::time::Instant::now() < deadline {
        if tokio::net::TcpStream::connect(admin_addr).await.is_ok()
            && client::get(admin_addr, "/readyz").await.0 == 200
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the admin port did not become ready");
}

#[tokio::test]
async fn serve_runs_from_env_and_drains_on_sigterm() {
    let backend = Backend::start(replay("vllm-chat-usage.sse", Duration::from_millis(2))).await;
    let (traffic, admin) = (free_port(), free_port());
    let child = Command::new(BIN)
        .arg("serve")
        .env("TOKENMETER_LISTEN", format!("127.0.0.1:{traffic}"))
        .env("TOKENMETER_ADMIN_LISTEN", format!("127.0.0.1:{admin}"))
        .env("TOKENMETER_UPSTREAM", &backend.url)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tokenmeter serve starts");
    let admin_addr = format!("127.0.0.1:{admin}").parse().expect("addr");
    let traffic_addr = format!("127.0.0.1:{traffic}").parse().expect("addr");

    wait_ready(admin_addr).await;

    let body = r#"{"model":"m","messages":[{"role":"user","content":"Hi"}],"stream":true}"#;
    let streamed = client::post(traffic_addr, "/v1/chat/completions", body).await;
    assert_eq!(
        streamed.bytes(),
        fixture("vllm-chat-no-usage.sse"),
        "usage injected and stripped"
    );
    let (_, metrics) = client::get(admin_addr, "/metrics").await;
    assert_eq!(
        support::prom::sum(
            &metrics,
            "tokenmeter_tokens_total",
            &[("gen_ai_token_type", "output")]
        ),
        7.0,
        "exact count from the injected usage"
    );

    let pid = child.id().to_string();
    let status = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill runs");
    assert!(status.success(), "SIGTERM sent");
    let exited = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .expect("join")
        .expect("wait");
    assert!(
        exited.status.success(),
        "exit 0 after draining: {:?}",
        exited.status
    );
    let log = String::from_utf8_lossy(&exited.stderr);
    assert!(log.contains("draining"), "the drain is logged: {log}");
    assert!(!log.contains("Hi\""), "no prompt text in the log: {log}");
}

#[test]
fn bad_config_is_refused_naming_the_key() {
    let dir = std::env::temp_dir().join(format!("tokenmeter-bad-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("bad.toml");
    std::fs::write(&path, "[upstream]\nidle_timeout = \"soon\"\n").expect("write config");
    let output = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&path)
        .output()
        .expect("tokenmeter runs");
    assert_eq!(output.status.code(), Some(1), "start refused");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("upstream.idle_timeout") && stderr.contains("invalid duration"),
        "the message names the key and the problem: {stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `tokenmeter serve --check --config PATH` with the listed `TOKENMETER_*` variables (and no others
/// from the test's own environment): its exit status, stdout and stderr.
fn check(path: &std::path::Path, env: &[(&str, &str)]) -> std::process::Output {
    let mut command = Command::new(BIN);
    command.args(["serve", "--check", "--config"]).arg(path);
    for var in ENV_VARS {
        command.env_remove(var);
    }
    command.envs(env.iter().copied());
    command.output().expect("tokenmeter runs")
}

/// The variables `serve` reads, kept out of the children unless a test sets them.
const ENV_VARS: [&str; 8] = [
    "TOKENMETER_LISTEN",
    "TOKENMETER_ADMIN_LISTEN",
    "TOKENMETER_UPSTREAM",
    "TOKENMETER_BUDGET_STORE",
    "TOKENMETER_TENANT_KEYS_FILE",
    "TOKENMETER_UPSTREAM_KEY_FILE",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
];

/// A directory of this test's own, removed when it ends.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("tokenmeter-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        TempDir(dir)
    }

    /// Writes `text` to `name` in the directory; its path.
    fn write(&self, name: &str, text: &str) -> std::path::PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).expect("write a file");
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn check_prints_the_effective_config_as_toml_that_checks_again() {
    let dir = TempDir::new("check-toml");
    let shipped = std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/tokenmeter.toml"
    ));
    let output = check(shipped, &[]);
    assert!(
        output.status.success(),
        "the shipped config checks: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let printed = String::from_utf8(output.stdout).expect("UTF-8");
    assert!(
        printed.contains("\n[slo]\nttft = \"800ms\"\ntpot = \"35ms\"\n"),
        "durations as the config writes them: {printed}"
    );
    let shipped_config = Config::from_toml(tokenmeter::config::SHIPPED).expect("shipped parses");
    assert_eq!(
        Config::from_toml(&printed).expect("the printed config parses"),
        shipped_config,
        "the printed config reads back to the shipped one"
    );

    // The environment's overrides are in what is printed, the secrets they carry are not, and
    // the printed file passes the check itself.
    let env = [
        ("TOKENMETER_LISTEN", "0.0.0.0:8080"),
        (
            "TOKENMETER_UPSTREAM",
            "http://vllm-a:8000,http://vllm-b:8000",
        ),
        (
            "TOKENMETER_BUDGET_STORE",
            "redis://default:hunter2@redis:6379/0",
        ),
    ];
    let output = check(shipped, &env);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let printed = String::from_utf8(output.stdout).expect("UTF-8");
    for line in [
        "listen = \"0.0.0.0:8080\"\n",
        "urls = [\"http://vllm-a:8000\", \"http://vllm-b:8000\"]\n",
        "store = \"redis://default:***@redis:6379/0\"\n",
    ] {
        assert!(printed.contains(line), "{line:?} printed: {printed}");
    }
    assert!(
        !printed.contains("hunter2"),
        "the Redis password is not printed: {printed}"
    );
    let saved = dir.write("printed.toml", &printed);
    let again = check(&saved, &[]);
    assert!(
        again.status.success(),
        "the printed config passes serve --check: {}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&again.stdout),
        printed,
        "checked again (without the environment), it prints the same config"
    );
}

/// `tokenmeter serve --config PATH` (none of the variables that would override the file), which
/// must refuse to start: its output, once it has exited (within [`PATIENCE`]; a binary that
/// started serving instead is killed and the test fails).
fn refused_serve(path: &std::path::Path) -> std::process::Output {
    let mut command = Command::new(BIN);
    command.args(["serve", "--config"]).arg(path);
    for var in ENV_VARS {
        command.env_remove(var);
    }
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tokenmeter runs");
    let deadline = std::time::Instant::now() + PATIENCE;
    while child.try_wait().expect("wait").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let output = child.wait_with_output().expect("wait");
            panic!(
                "tokenmeter serve {} was still running after {PATIENCE:?}: it did not refuse to \
                 start: {}",
                path.display(),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("wait")
}

/// Every file `serve` reads and every URL it parses, `serve --check` reads and parses too: a
/// file that is not there fails both, with the same message naming its key and the path, and
/// `serve` fails before it binds or says it is serving.
#[test]
fn check_and_serve_refuse_a_file_that_is_not_there_naming_its_key() {
    let dir = TempDir::new("check-files");
    let gone = |name: &str| dir.0.join("gone").join(name).display().to_string();
    let not_found = "No such file or directory (os error 2)";
    let cases = [
        (
            "the tenants' keys",
            format!(
                "[tenants]\nsources = [\"api_key\"]\nkeys_file = \"{}\"\n",
                gone("keys")
            ),
            format!("tenants.keys_file {}: {not_found}", gone("keys")),
        ),
        (
            "the backend's key",
            format!(
                "[tenants]\nsources = [\"header\"]\nupstream_key_file = \"{}\"\n",
                gone("upstream-key")
            ),
            format!(
                "tenants.upstream_key_file {}: {not_found}",
                gone("upstream-key")
            ),
        ),
        (
            "the traffic listener's certificate",
            format!(
                "[server.tls]\ncert = \"{}\"\nkey = \"{}\"\n",
                gone("server.crt"),
                gone("server.key")
            ),
            format!(
                "config: server.tls.cert: cannot read {}: {not_found}",
                gone("server.crt")
            ),
        ),
        (
            "the upstreams' CA",
            format!(
                "[upstream]\nurls = [\"https://127.0.0.1:9\"]\n[upstream.tls]\nca = \"{}\"\n",
                gone("upstream-ca.crt")
            ),
            format!(
                "config: upstream.tls.ca: cannot read {}: {not_found}",
                gone("upstream-ca.crt")
            ),
        ),
        (
            "the budget store's CA",
            format!(
                "[tenants.budgets]\nstore = \"rediss://127.0.0.1:9\"\n\
                 [tenants.budgets.store_tls]\nca = \"{}\"\n",
                gone("redis-ca.crt")
            ),
            format!(
                "config: tenants.budgets.store_tls.ca: cannot read {}: {not_found}",
                gone("redis-ca.crt")
            ),
        ),
        (
            "the usage records' directory",
            format!("[tenants.usage]\npath = \"{}\"\n", gone("usage.jsonl")),
            format!("tenants.usage.path {}: {not_found}", gone("usage.jsonl")),
        ),
    ];
    for (i, (what, table, message)) in cases.iter().enumerate() {
        let listeners = format!(
            "[server]\nlisten = \"127.0.0.1:{}\"\nadmin_listen = \"127.0.0.1:{}\"\n",
            free_port(),
            free_port()
        );
        let path = dir.write(&format!("{i}.toml"), &format!("{listeners}{table}"));
        let expected = format!("tokenmeter: {message}\n");

        let checked = check(&path, &[]);
        assert_eq!(checked.status.code(), Some(1), "{what}: --check fails");
        assert_eq!(
            String::from_utf8_lossy(&checked.stderr),
            expected,
            "{what}: --check names the key and the path, and says nothing else"
        );
        assert!(checked.stdout.is_empty(), "{what}: no config printed");

        let served = refused_serve(&path);
        assert_eq!(served.status.code(), Some(1), "{what}: serve fails");
        assert_eq!(
            String::from_utf8_lossy(&served.stderr),
            expected,
            "{what}: serve fails with the same words, before it logs that it is serving"
        );
    }

    // A usage file that is not there yet, in a directory that is: --check passes, and leaves no
    // file behind (serve would create it).
    let usage = dir.0.join("usage.jsonl");
    let path = dir.write(
        "usage.toml",
        &format!("[tenants.usage]\npath = \"{}\"\n", usage.display()),
    );
    let checked = check(&path, &[]);
    assert!(
        checked.status.success(),
        "{}",
        String::from_utf8_lossy(&checked.stderr)
    );
    assert!(!usage.exists(), "--check created no usage file");
}

#[test]
fn check_into_a_pipe_closed_after_one_line_exits_cleanly() {
    use std::io::BufRead;
    let dir = TempDir::new("check-pipe");
    // Far more than a pipe holds (64 KiB), so the binary is still writing when the reader leaves.
    let models: Vec<String> = (0..20_000).map(|i| format!("\"model-{i:05}\"")).collect();
    let path = dir.write(
        "big.toml",
        &format!("[metering]\nmodels = [{}]\n", models.join(", ")),
    );
    let mut child = Command::new(BIN)
        .args(["serve", "--check", "--config"])
        .arg(&path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tokenmeter starts");
    let mut first = String::new();
    let mut stdout = std::io::BufReader::new(child.stdout.take().expect("piped"));
    stdout.read_line(&mut first).expect("one line");
    assert!(
        first.starts_with('#'),
        "the first line is the header comment: {first:?}"
    );
    drop(stdout); // `| head -1`
    let exited = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&exited.stderr);
    assert!(
        exited.status.success(),
        "exit 0 when the reader leaves: {:?} {stderr}",
        exited.status
    );
    assert!(!stderr.contains("panicked"), "no panic: {stderr}");
    assert!(
        stderr.is_empty(),
        "nothing said about the closed pipe: {stderr}"
    );
}

/// The testbed's commands print tables into a pipe whose reader is gone from the start: each
/// ends as it would have without the print (no panic).
#[cfg(feature = "testbed")]
#[test]
fn the_testbeds_tables_into_a_closed_pipe_do_not_panic() {
    let refusing = support::ports::Refusing::new();
    let runs: [(&str, Vec<String>, Option<&str>); 2] = [
        (
            "demo",
            [
                "demo",
                "--rate",
                "20",
                "--duration",
                "300ms",
                "--workload",
                "chat:1:prompt=fixed:16:output=fixed:4",
            ]
            .map(str::to_owned)
            .to_vec(),
            None,
        ),
        (
            // Every request is refused: the table (of failures) is printed, then the error.
            "bench",
            vec![
                "bench".to_owned(),
                "--url".to_owned(),
                refusing.url(),
                "--model".to_owned(),
                "m".to_owned(),
                "--requests".to_owned(),
                "2".to_owned(),
            ],
            Some("no request succeeded"),
        ),
    ];
    for (name, args, error) in runs {
        let mut child = Command::new(BIN)
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tokenmeter starts");
        drop(child.stdout.take()); // the reader is gone before anything is written
        let exited = child.wait_with_output().expect("wait");
        let stderr = String::from_utf8_lossy(&exited.stderr);
        assert!(!stderr.contains("panicked"), "{name}: no panic: {stderr}");
        match error {
            None => assert!(exited.status.success(), "{name}: exit 0: {stderr}"),
            Some(error) => {
                assert_eq!(exited.status.code(), Some(1), "{name}: {stderr}");
                assert!(
                    stderr.contains(error),
                    "{name} ran past its table: {stderr}"
                );
            }
        }
    }
}

#[test]
fn a_listener_that_cannot_bind_is_named_by_its_key_or_variable() {
    let dir = TempDir::new("bind-error");
    // Held for the whole test: the binary cannot bind it.
    let held = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let taken = held.local_addr().expect("addr").to_string();
    let free = || format!("127.0.0.1:{}", free_port());
    let serve = |config: &std::path::Path, env: &[(&str, String)]| {
        let mut command = Command::new(BIN);
        command.args(["serve", "--config"]).arg(config);
        for var in ENV_VARS {
            command.env_remove(var);
        }
        command.envs(env.iter().map(|(var, value)| (var, value)));
        command.output().expect("tokenmeter runs")
    };
    let file = |listen: &str, admin: &str| {
        dir.write(
            &format!("{}.toml", listen.replace([':', '.'], "_")),
            &format!("[server]\nlisten = \"{listen}\"\nadmin_listen = \"{admin}\"\n"),
        )
    };
    let cases = [
        (
            "traffic from the file",
            serve(&file(&taken, &free()), &[]),
            format!("cannot bind the traffic listener on {taken} (server.listen): "),
        ),
        (
            "admin from the file",
            serve(&file(&free(), &taken), &[]),
            format!("cannot bind the admin listener on {taken} (server.admin_listen): "),
        ),
        (
            "traffic from the environment",
            serve(&file(&free(), &free()), &[("TOKENMETER_LISTEN", taken.clone())]),
            format!(
                "cannot bind the traffic listener on {taken} (TOKENMETER_LISTEN, which overrides server.listen): "
            ),
        ),
        (
            "admin from the environment",
            serve(
                &file(&free(), &free()),
                &[
                    ("TOKENMETER_LISTEN", free()),
                    ("TOKENMETER_ADMIN_LISTEN", taken.clone()),
                ],
            ),
            format!(
                "cannot bind the admin listener on {taken} (TOKENMETER_ADMIN_LISTEN, which overrides server.admin_listen): "
            ),
        ),
    ];
    for (case, output, message) in cases {
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            output.status.code(),
            Some(1),
            "{case}: start refused: {stderr}"
        );
        assert!(
            stderr.contains(&message) && stderr.contains("in use"),
            "{case}: the message names the address, what set it and why: {stderr}"
        );
    }
    #[cfg(feature = "testbed")]
    for (args, message) in [
        (
            vec!["sim", "--listen", taken.as_str()],
            format!("cannot bind the sim listener on {taken} (--listen): "),
        ),
        (
            vec!["demo", "--admin-listen", taken.as_str()],
            format!("cannot bind the admin listener on {taken} (--admin-listen): "),
        ),
    ] {
        let output = Command::new(BIN)
            .args(&args)
            .output()
            .expect("tokenmeter runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: refused: {stderr}");
        assert!(
            stderr.contains(&message),
            "{args:?}: the flag is named: {stderr}"
        );
    }
    drop(held);
}

/// A child process killed when the test ends early (a failed assert), so none is left running.
struct KillOnDrop(Option<std::process::Child>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(child) = self.0.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `tokenmeter_config_reloads_total{result}` as the admin port says it now.
async fn reloads(admin: std::net::SocketAddr, result: &str) -> f64 {
    let (_, metrics) = client::get(admin, "/metrics").await;
    support::prom::sum(
        &metrics,
        "tokenmeter_config_reloads_total",
        &[("result", result)],
    )
}

/// Polls the admin port until `tokenmeter_config_reloads_total{result}` is `value` (at most
/// [`PATIENCE`]).
async fn wait_for_reloads(admin: std::net::SocketAddr, result: &str, value: f64) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let seen = reloads(admin, result).await;
        if seen == value {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "reloads {{result={result}}} stayed at {seen}, expected {value}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn the_file_watch_and_sighup_reload_the_config_file() {
    let vllm = |_: &support::backend::Seen| {
        Script::sse(
            events_of(&fixture("vllm-chat-usage.sse"))
                .into_iter()
                .map(|e| (Duration::from_millis(1), e))
                .collect(),
        )
    };
    let mut a = Backend::start(vllm).await;
    let mut b = Backend::start(vllm).await;
    let (traffic, admin) = (free_port(), free_port());
    let dir = std::env::temp_dir().join(format!("tokenmeter-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("tokenmeter.toml");
    let write = |upstream: &str, watch: bool| {
        let text = format!(
            "[server]\nlisten = \"127.0.0.1:{traffic}\"\nadmin_listen = \"127.0.0.1:{admin}\"\n\
             watch_config = {watch}\nwatch_interval = \"100ms\"\n[upstream]\nurls = [\"{upstream}\"]\n"
        );
        std::fs::write(&path, text).expect("write config");
    };
    write(&a.url, true);
    let child = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tokenmeter serve starts");
    let mut child = KillOnDrop(Some(child));
    let admin_addr: std::net::SocketAddr = format!("127.0.0.1:{admin}").parse().expect("addr");
    let traffic_addr: std::net::SocketAddr = format!("127.0.0.1:{traffic}").parse().expect("addr");
    wait_ready(admin_addr).await;
    let body = r#"{"model":"m","messages":[{"role":"user","content":"Hi"}],"stream":true,"stream_options":{"include_usage":true}}"#;
    let chat = "/v1/chat/completions";
    client::post(traffic_addr, chat, body).await;
    a.next_request().await;

    // The watch sees the new file. How long it took to apply it, on this machine under whatever
    // load it has, is the measure of "the watch would have applied it by now" below.
    let written = tokio::time::Instant::now();
    write(&b.url, true);
    wait_for_reloads(admin_addr, "ok", 1.0).await;
    let applied_in = written.elapsed();
    client::post(traffic_addr, chat, body).await;
    b.next_request().await;

    // A broken file is refused; the running config stays.
    std::fs::write(&path, "[upstream]\nurls = [\"ftp://nowhere\"]\n").expect("write");
    wait_for_reloads(admin_addr, "error", 1.0).await;
    client::post(traffic_addr, chat, body).await;
    b.next_request().await;

    // A file that turns the watch off, then a change only SIGHUP applies.
    write(&a.url, false);
    wait_for_reloads(admin_addr, "ok", 2.0).await;
    write(&b.url, false);
    // Nothing to wait for: what must not happen is a reload. So watch for one, for four times what
    // the watch took to apply a change above (and at least four of its 100 ms intervals): a watch
    // still on would have applied this change well within that, however loaded the machine.
    let window = (applied_in * 4).max(Duration::from_millis(400));
    let deadline = tokio::time::Instant::now() + window;
    while tokio::time::Instant::now() < deadline {
        assert_eq!(
            reloads(admin_addr, "ok").await,
            2.0,
            "the watch is off: the change waits for SIGHUP"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    client::post(traffic_addr, chat, body).await;
    a.next_request().await;
    let pid = child
        .0
        .as_ref()
        .map(|c| c.id().to_string())
        .unwrap_or_default();
    let hup = Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .expect("kill runs");
    assert!(hup.success(), "SIGHUP sent");
    wait_for_reloads(admin_addr, "ok", 3.0).await;
    client::post(traffic_addr, chat, body).await;
    b.next_request().await;

    let _ = Command::new("kill").args(["-TERM", &pid]).status();
    let child = child.0.take().expect("still ours");
    let exited = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .expect("join")
        .expect("wait");
    let log = String::from_utf8_lossy(&exited.stderr);
    assert!(
        log.contains("config reload refused") && log.contains("upstream.urls[0]"),
        "the refusal is logged with the key: {log}"
    );
    assert!(log.contains("SIGHUP"), "the trigger is logged: {log}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn the_opentelemetry_variables_turn_tracing_on_and_sigterm_sends_the_last_spans() {
    let receiver = otlp::Receiver::start(otlp::Protocol::Grpc).await;
    let backend = Backend::start(replay("vllm-chat-usage.sse", Duration::from_millis(2))).await;
    let (traffic, admin) = (free_port(), free_port());
    let mut child = Command::new(BIN)
        .arg("serve")
        .env("TOKENMETER_LISTEN", format!("127.0.0.1:{traffic}"))
        .env("TOKENMETER_ADMIN_LISTEN", format!("127.0.0.1:{admin}"))
        .env("TOKENMETER_UPSTREAM", &backend.url)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint())
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .env("OTEL_SERVICE_NAME", "sidecar-7")
        .env("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("tokenmeter serve starts");
    let admin_addr = format!("127.0.0.1:{admin}").parse().expect("addr");
    let traffic_addr = format!("127.0.0.1:{traffic}").parse().expect("addr");
    wait_ready(admin_addr).await;

    let body = r#"{"model":"m","messages":[{"role":"user","content":"Hi"}],"stream":true}"#;
    let streamed = client::post(traffic_addr, "/v1/chat/completions", body).await;
    assert_eq!(streamed.status, 200);
    // The default batch delay is 1 s: SIGTERM at once, and the spans still arrive (flushed at
    // exit; the 10 s only turn spans that never come into a failure).
    let pid = child.id().to_string();
    let _ = Command::new("kill").args(["-TERM", &pid]).status();
    let spans = receiver.wait_for_spans(2, Duration::from_secs(10)).await;
    let server = spans
        .iter()
        .find(|s| s.kind_name() == "server")
        .expect("the server span");
    assert_eq!(server.name, "chat m");
    assert_eq!(
        server.resource.get("service.name").and_then(|v| v.as_str()),
        Some("sidecar-7")
    );
    assert_eq!(
        server
            .resource
            .get("deployment.environment")
            .and_then(|v| v.as_str()),
        Some("test")
    );
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .expect("joined")
        .expect("waited");
    assert!(status.success(), "a clean exit: {status}");
}
