use super::*;
use crate::config::Config;

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tokenmeter-usage-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn counted(metrics: &Metrics, name: &str, reason: Option<&str>) -> f64 {
    crate::metrics::exposition::samples(&metrics.render())
        .into_iter()
        .filter(|s| {
            s.name == name
                && reason.map_or(true, |r| {
                    s.labels.get("reason").map(String::as_str) == Some(r)
                })
        })
        .map(|s| s.value)
        .sum()
}

#[test]
fn files_rotate_by_size_and_keep_as_many_as_asked() {
    let dir = temp_dir("rotate");
    let path = dir.join("usage.jsonl");
    let metrics = Metrics::new(&Config::default()).expect("metrics");
    let config = UsageConfig {
        path: path.display().to_string(),
        max_file_bytes: 4096,
        keep_files: 2,
        queue_records: 1024,
        flush_interval: Duration::from_millis(10),
    };
    let log = UsageLog::start(&config, &metrics).expect("opens");
    let line = "x".repeat(1023);
    // 4 lines of 1 KiB (with the newline) fill a file: 14 lines make 3 rotations and 2 left over.
    for _ in 0..14 {
        log.offer(line.clone());
    }
    log.close(Duration::from_secs(5));
    let lines = |p: &PathBuf| {
        std::fs::read_to_string(p)
            .map(|text| text.lines().count())
            .unwrap_or(0)
    };
    let numbered = |n: u32| PathBuf::from(format!("{}.{n}", path.display()));
    assert_eq!(lines(&path), 2, "the current file");
    assert_eq!(
        (lines(&numbered(1)), lines(&numbered(2))),
        (4, 4),
        "two kept"
    );
    assert!(!numbered(3).exists(), "the oldest removed");
    assert_eq!(counted(&metrics, RECORDS, None), 14.0, "every line written");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_full_queue_drops_and_counts_without_waiting() {
    let metrics = Metrics::new(&Config::default()).expect("metrics");
    // A queue of one that nobody drains.
    let (tx, _rx) = mpsc::sync_channel(1);
    let log = UsageLog {
        tx,
        written: metrics.counter(RECORDS, Vec::new()),
        dropped: ["queue_full", "write_failed", "closed"]
            .map(|reason| metrics.counter(RECORDS_DROPPED, vec![Label::new("reason", reason)])),
    };
    log.offer("one".to_owned());
    log.offer("two".to_owned());
    log.offer("three".to_owned());
    assert_eq!(
        counted(&metrics, RECORDS_DROPPED, Some("queue_full")),
        2.0,
        "past the bound: dropped, counted"
    );
}

#[test]
fn a_path_that_does_not_open_is_named() {
    let metrics = Metrics::new(&Config::default()).expect("metrics");
    let config = UsageConfig {
        path: "/nonexistent/dir/usage.jsonl".to_owned(),
        ..UsageConfig::default()
    };
    let err = UsageLog::start(&config, &metrics).expect_err("no such directory");
    assert!(
        err.contains("tenants.usage.path /nonexistent/dir/usage.jsonl"),
        "{err}"
    );
}

#[test]
fn the_check_refuses_what_start_refuses_and_writes_nothing() {
    let dir = temp_dir("check");
    let at = |path: &std::path::Path| UsageConfig {
        path: path.display().to_string(),
        ..UsageConfig::default()
    };
    let missing = dir.join("usage.jsonl");
    assert_eq!(
        UsageLog::check(&at(&missing)),
        Ok(()),
        "a file start would create"
    );
    assert!(!missing.exists(), "the check did not create it");
    std::fs::write(&missing, "kept\n").expect("write");
    assert_eq!(UsageLog::check(&at(&missing)), Ok(()), "an existing file");
    assert_eq!(
        std::fs::read_to_string(&missing).expect("read"),
        "kept\n",
        "the check did not write to it"
    );
    let no_dir = dir.join("none").join("usage.jsonl");
    assert_eq!(
        UsageLog::check(&at(&no_dir)),
        Err(format!(
            "tenants.usage.path {}: No such file or directory (os error 2)",
            no_dir.display()
        )),
        "a directory that is not there"
    );
    let metrics = Metrics::new(&Config::default()).expect("metrics");
    assert_eq!(
        UsageLog::start(&at(&no_dir), &metrics).map(drop),
        UsageLog::check(&at(&no_dir)),
        "start refuses it with the same words"
    );
    let file_as_dir = missing.join("usage.jsonl");
    assert_eq!(
        UsageLog::check(&at(&file_as_dir)),
        Err(format!(
            "tenants.usage.path {}: Not a directory (os error 20)",
            file_as_dir.display()
        )),
        "a file where its directory should be"
    );
    assert_eq!(
        UsageLog::check(&UsageConfig {
            path: "-".to_owned(),
            ..UsageConfig::default()
        }),
        Ok(()),
        "stdout"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
