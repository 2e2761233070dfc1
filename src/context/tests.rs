use std::sync::Mutex;
use std::time::Duration;

use super::*;

const DEBUG: bool = cfg!(debug_assertions);

/// One finish: outcome, pool, output tokens, the error's text.
type Seen = (Outcome, Option<String>, u64, Option<String>);

/// Every finish it hears of.
#[derive(Debug, Default)]
struct Recorder(Mutex<Vec<Seen>>);

impl FinishHook for Recorder {
    fn finished(&self, request: &Finished<'_>) {
        self.0.lock().expect("lock").push((
            request.outcome,
            request.context.route.pool.as_deref().map(str::to_owned),
            request.figures.output_tokens,
            request.error.map(|err| err.to_string()),
        ));
    }
}

fn recorded() -> (Arc<Recorder>, FinishHooks) {
    let recorder = Arc::new(Recorder::default());
    let hook: Arc<dyn FinishHook> = recorder.clone();
    (recorder, FinishHooks::new([hook]))
}

fn head(hooks: FinishHooks) -> Box<RequestContext> {
    let uri: Uri = "/v1/chat/completions".parse().expect("uri");
    RequestContext::for_head(
        Instant::now(),
        &Method::POST,
        &uri,
        &HeaderMap::new(),
        hooks,
    )
}

#[test]
fn finish_runs_every_hook_once_with_the_whole_context() {
    let first = Arc::new(Recorder::default());
    let second = Arc::new(Recorder::default());
    let both = FinishHooks::new([
        first.clone() as Arc<dyn FinishHook>,
        second.clone() as Arc<dyn FinishHook>,
    ]);
    let mut context = head(both);
    context.route.pool = Some(Arc::from("decode"));
    let at = context.received;
    context.stream.on_token(at + Duration::from_millis(5), None);
    context.stream.on_token(at + Duration::from_millis(9), None);
    let error = std::io::Error::other("cut");
    context.finish_at(
        Outcome::UpstreamError,
        at + Duration::from_millis(10),
        Some(&error),
    );
    for recorder in [&first, &second] {
        assert_eq!(
            *recorder.0.lock().expect("lock"),
            vec![(
                Outcome::UpstreamError,
                Some("decode".to_owned()),
                2,
                Some("cut".to_owned())
            )],
            "each hook saw the one finish, with the pool, the stream's figures and the error"
        );
    }
}

#[test]
fn a_context_dropped_unfinished_ends_cancelled_with_what_the_phases_wrote() {
    let (recorder, hooks) = recorded();
    let mut context = head(hooks);
    context.route.pool = Some(Arc::from("prefill"));
    drop(context);
    assert_eq!(
        *recorder.0.lock().expect("lock"),
        vec![(Outcome::Cancelled, Some("prefill".to_owned()), 0, None)],
        "abandoned = cancelled, finished once"
    );
}

#[test]
fn a_clone_never_ends_the_request() {
    let (recorder, hooks) = recorded();
    let context = head(hooks);
    let copy = context.clone();
    copy.clone().finish(Outcome::Ok, None);
    drop(copy);
    assert!(
        recorder.0.lock().expect("lock").is_empty(),
        "a copy of what the phases wrote is not the request"
    );
    context.finish(Outcome::Ok, None);
    assert_eq!(
        recorder.0.lock().expect("lock").len(),
        1,
        "the original ends it, once"
    );
}

#[test]
fn the_head_names_the_dialect_and_the_trace() {
    let uri: Uri = "/v1/completions".parse().expect("uri");
    let mut headers = HeaderMap::new();
    headers.insert(
        "traceparent",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
            .parse()
            .expect("header"),
    );
    let context = RequestContext::for_head(
        Instant::now(),
        &Method::POST,
        &uri,
        &headers,
        FinishHooks::default(),
    );
    assert_eq!(context.dialect, Some(Dialect::OpenAiCompletions), "dialect");
    assert_eq!(
        context.trace.map(|trace| trace.hex()),
        Some("0af7651916cd43dd8448eb211c80319c".to_owned()),
        "trace id"
    );
    let get = RequestContext::for_head(
        Instant::now(),
        &Method::GET,
        &"/v1/models".parse().expect("uri"),
        &HeaderMap::new(),
        FinishHooks::default(),
    );
    assert_eq!(get.dialect, None, "not a generation request");
}

#[test]
fn take_and_put_carry_the_context_and_a_missing_one_is_counted() {
    let (recorder, hooks) = recorded();
    let mut extensions = Extensions::new();
    let mut context = head(hooks);
    context.route.attempts = 3;
    context.put(&mut extensions);
    let taken = RequestContext::take(&mut extensions, "test").expect("it is there");
    assert_eq!(taken.route.attempts, 3, "the same context, not a new one");
    taken.finish(Outcome::Ok, None);
    assert_eq!(recorder.0.lock().expect("lock").len(), 1, "finished once");

    let before = RequestContext::missing();
    let missing = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        RequestContext::take(&mut extensions, "test").map(|_| ())
    }));
    assert!(
        RequestContext::missing() > before,
        "a missing context is counted"
    );
    // A debug build stops at the bug; a release build answers without a context, never a made-up one.
    assert_eq!(
        missing.map(|found| found.is_none()).map_err(|_| ()),
        if DEBUG { Err(()) } else { Ok(true) },
        "debug builds assert"
    );
}
