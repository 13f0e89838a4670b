//! Bounded waits on child processes: a `ferry serve` until it listens, a command until it
//! exits. A process that outlives its bound is killed and reaped.

use std::io::Read;
use std::path::Path;
use std::process::{Child, Output};
use std::time::{Duration, Instant};

use crate::error::GatewayError;
use crate::START_BOUND;

const POLL: Duration = Duration::from_millis(10);

/// Waits, at most [`START_BOUND`], for the just-spawned `ferry serve` `child` to write a whole
/// `api.addr` in `home`, and returns that file. Fails at once, with its log (`serve.log` in
/// `home`), if the process exits first; kills and reaps it, then fails, when the bound passes.
/// `who` names the gateway in those errors.
pub fn wait_until_listening(
    child: &mut Child,
    home: &Path,
    who: &str,
) -> Result<String, GatewayError> {
    let log = || std::fs::read_to_string(home.join("serve.log")).unwrap_or_default();
    let started = Instant::now();
    loop {
        if let Some(api) = std::fs::read_to_string(home.join("api.addr"))
            .ok()
            .filter(|s| s.ends_with('\n'))
        {
            return Ok(api);
        }
        if let Some(status) = child.try_wait().ok().flatten() {
            return Err(GatewayError::Exited {
                who: who.to_string(),
                status,
                log: log(),
            });
        }
        if started.elapsed() > START_BOUND {
            let _ = child.kill();
            let _ = child.wait();
            return Err(GatewayError::NotListening {
                who: who.to_string(),
                bound: START_BOUND,
                log: log(),
            });
        }
        std::thread::sleep(POLL);
    }
}

/// Waits at most `bound` for `child` to exit, reading its standard output and error meanwhile
/// if they are piped (so a long output cannot stall it); kills and reaps it after the bound.
/// `what` names it in the error.
pub fn wait_bounded(mut child: Child, what: &str, bound: Duration) -> Result<Output, GatewayError> {
    fn drain(pipe: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                // What was read before an error is still worth showing.
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    }
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() < bound => std::thread::sleep(POLL),
            Ok(None) | Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(GatewayError::TimedOut {
                    what: what.to_string(),
                    bound,
                });
            }
        }
    };
    Ok(Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    })
}
