//! Writing a command's output to stdout, for a person or for a pipe.
//!
//! A reader that went away (a closed pipe: `tokenmeter serve --check | head -1`) is the end of the
//! output, not an error: what is left is not wanted, and `println!` would panic ("failed printing
//! to stdout: Broken pipe"). `serve --check` and the testbed's tables print through here.
use std::io::Write;

/// Writes `args` to stdout and flushes. A closed pipe ends the output quietly; any other failure
/// (a full disk) is returned.
pub(crate) fn print(args: std::fmt::Arguments<'_>) -> std::io::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_fmt(args).and_then(|()| stdout.flush()) {
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        done => done,
    }
}
