//! The jq evaluator process: the service's own executable started with [`EVALUATOR_ARG`]
//! (see [`run_if_requested`]). It limits itself before reading anything (memory through
//! `RLIMIT_DATA`, no core dumps), runs programs on one thread with a fixed stack, and answers
//! requests one at a time over stdin/stdout. A program that recurses too deep overflows that
//! stack and a program that allocates too much fails an allocation: either way the process
//! aborts, with Rust's message on stderr, which the service reads to name the limit
//! (`sandbox.rs`). It exits when its stdin closes, even in the middle of an evaluation, so it
//! never outlives the service.
//!
//! Frames, both ways: a 4-byte big-endian length, then the bytes. Requests: `c` + program
//! (compile only), or `r` + 4-byte program length + program + input JSON. Replies: `o` + the
//! result's JSON text, or `e` + an error message.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io::{Read, Write};
use std::process::ExitCode;

use super::program::JqProgram;

/// The first argument that turns a berth executable into a jq evaluator.
pub const EVALUATOR_ARG: &str = "--berth-jq-evaluator";

/// The frame an evaluator writes once it is ready for requests.
pub const READY: &[u8] = b"ready";
/// Largest request frame an evaluator reads (a Kubernetes object is at most a few MiB).
pub const MAX_REQUEST: usize = 64 << 20;
/// Compiled programs an evaluator keeps; past this the cache starts over.
const CACHED_PROGRAMS: usize = 256;

/// Limits passed on the evaluator's command line, in this order.
#[derive(Clone, Copy, Debug)]
pub struct ChildLimits {
    pub memory_bytes: u64,
    pub stack_bytes: usize,
    pub output_bytes: usize,
}

impl ChildLimits {
    pub fn to_args(self) -> [String; 3] {
        [
            self.memory_bytes.to_string(),
            self.stack_bytes.to_string(),
            self.output_bytes.to_string(),
        ]
    }

    fn from_args(args: &[String]) -> Option<ChildLimits> {
        match args {
            [memory, stack, output] => Some(ChildLimits {
                memory_bytes: memory.parse().ok()?,
                stack_bytes: stack.parse().ok()?,
                output_bytes: output.parse().ok()?,
            }),
            _ => None,
        }
    }
}

/// Runs the jq evaluator when this process was started as one, and returns its exit code;
/// `None` otherwise. Every executable that runs a service evaluating jq (`berth-hookevent`,
/// `berth-lifecycle`, `berth` for `berth up`) calls this first thing in `main`, before any
/// runtime or thread starts.
pub fn run_if_requested() -> Option<ExitCode> {
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref() != Some(OsStr::new(EVALUATOR_ARG)) {
        return None;
    }
    let rest: Vec<String> = args.filter_map(|a| a.into_string().ok()).collect();
    let Some(limits) = ChildLimits::from_args(&rest) else {
        eprintln!("{EVALUATOR_ARG} takes: MEMORY_BYTES STACK_BYTES OUTPUT_BYTES");
        return Some(ExitCode::from(2));
    };
    Some(serve(limits))
}

fn serve(limits: ChildLimits) -> ExitCode {
    use nix::sys::resource::{Resource, setrlimit};
    // A crash must not leave a core file of whatever the program built.
    let _ = setrlimit(Resource::RLIMIT_CORE, 0, 0);
    // RLIMIT_DATA counts the heap and every private writable mapping (thread stacks included)
    // but not the executable's own mappings, so it bounds what a program can allocate.
    if let Err(e) = setrlimit(
        Resource::RLIMIT_DATA,
        limits.memory_bytes,
        limits.memory_bytes,
    ) {
        eprintln!("jq evaluator: cannot limit its memory: {e}");
        return ExitCode::FAILURE;
    }
    let (requests, received) = std::sync::mpsc::sync_channel::<Vec<u8>>(1);
    let worker = std::thread::Builder::new()
        .name("jq".into())
        .stack_size(limits.stack_bytes)
        .spawn(move || evaluate(received, limits.output_bytes));
    if let Err(e) = worker {
        eprintln!("jq evaluator: cannot start its thread: {e}");
        return ExitCode::FAILURE;
    }
    // This thread only reads: when the service goes away, stdin ends and the process exits,
    // whatever the evaluation thread is doing.
    let mut stdin = std::io::stdin().lock();
    while let Ok(Some(frame)) = read_frame(&mut stdin, MAX_REQUEST) {
        if requests.send(frame).is_err() {
            break;
        }
    }
    ExitCode::SUCCESS
}

// The evaluator is a child process whose parent went away when its pipe breaks: it exits at
// once (nothing of its own to clean up), which `process::exit` is for here.
#[allow(clippy::disallowed_methods)]
fn evaluate(requests: std::sync::mpsc::Receiver<Vec<u8>>, output_limit: usize) {
    let mut programs: HashMap<String, JqProgram> = HashMap::new();
    let mut stdout = std::io::stdout().lock();
    // Started, limited and ready: the service's clock for a program's time limit starts once
    // it has read this, so a slow start (a cold page cache, a busy machine) is no program's fault.
    if write_frame(&mut stdout, READY).is_err() {
        std::process::exit(0);
    }
    for request in requests {
        let reply = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            answer(&mut programs, &request, output_limit)
        }))
        .unwrap_or_else(|_| Err("the evaluator panicked".into()));
        let frame = match reply {
            Ok(text) => [b"o".as_slice(), text.as_bytes()].concat(),
            Err(message) => [b"e".as_slice(), message.as_bytes()].concat(),
        };
        if write_frame(&mut stdout, &frame).is_err() {
            std::process::exit(0);
        }
    }
}

fn answer(
    programs: &mut HashMap<String, JqProgram>,
    request: &[u8],
    output_limit: usize,
) -> Result<String, String> {
    let (source, input) = match request.split_first() {
        Some((b'c', source)) => (source, None),
        Some((b'r', rest)) if rest.len() >= 4 => {
            let (len, rest) = rest.split_at(4);
            let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
            if len > rest.len() {
                return Err("malformed request".into());
            }
            let (source, input) = rest.split_at(len);
            (source, Some(input))
        }
        _ => return Err("malformed request".into()),
    };
    let source = std::str::from_utf8(source).map_err(|_| "the program is not UTF-8")?;
    if !programs.contains_key(source) {
        let program = JqProgram::compile(source)?;
        if programs.len() >= CACHED_PROGRAMS {
            programs.clear();
        }
        programs.insert(source.to_owned(), program);
    }
    let Some(input) = input else {
        return Ok(String::new());
    };
    let program = programs.get(source).ok_or("the program vanished")?;
    program.run_json(input, output_limit)
}

/// Reads one frame; `None` at a clean end of the stream.
pub fn read_frame(r: &mut impl Read, limit: usize) -> std::io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > limit {
        return Err(std::io::Error::other(format!(
            "a frame of {len} bytes exceeds {limit}"
        )));
    }
    let mut frame = vec![0u8; len];
    r.read_exact(&mut frame)?;
    Ok(Some(frame))
}

fn write_frame(w: &mut impl Write, frame: &[u8]) -> std::io::Result<()> {
    let len = u32::try_from(frame.len()).map_err(std::io::Error::other)?;
    w.write_all(&len.to_be_bytes())?;
    w.write_all(frame)?;
    w.flush()
}

/// A request frame (without its length prefix): compile `source`, and run it on `input` if any.
pub fn request(source: &str, input: Option<&[u8]>) -> Vec<u8> {
    match input {
        None => [b"c".as_slice(), source.as_bytes()].concat(),
        Some(input) => {
            let mut r = Vec::with_capacity(5 + source.len() + input.len());
            r.push(b'r');
            r.extend_from_slice(&(source.len() as u32).to_be_bytes());
            r.extend_from_slice(source.as_bytes());
            r.extend_from_slice(input);
            r
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_answered_in_process() {
        let mut programs = HashMap::new();
        let run = request(".a", Some(br#"{"a": [1]}"#));
        assert_eq!(answer(&mut programs, &run, 100).unwrap(), "[1]");
        assert_eq!(programs.len(), 1, "compiled once and kept");
        assert_eq!(
            answer(&mut programs, &request(".b", None), 100).unwrap(),
            ""
        );
        let e = answer(&mut programs, &request(".[", None), 100).unwrap_err();
        assert!(e.contains("does not compile"), "{e}");
        let e = answer(&mut programs, b"x", 100).unwrap_err();
        assert!(e.contains("malformed"), "{e}");
    }

    #[test]
    fn frames_round_trip_and_are_bounded() {
        let mut buf = vec![];
        write_frame(&mut buf, b"hello").unwrap();
        let mut r = buf.as_slice();
        assert_eq!(read_frame(&mut r, 10).unwrap().unwrap(), b"hello");
        assert!(read_frame(&mut r, 10).unwrap().is_none(), "clean end");
        let e = read_frame(&mut buf.as_slice(), 4).unwrap_err();
        assert!(e.to_string().contains("exceeds 4"), "{e}");
    }

    #[test]
    fn limits_travel_as_arguments() {
        let l = ChildLimits {
            memory_bytes: 1,
            stack_bytes: 2,
            output_bytes: 3,
        };
        let args = l.to_args().to_vec();
        let back = ChildLimits::from_args(&args).unwrap();
        assert_eq!(
            (back.memory_bytes, back.stack_bytes, back.output_bytes),
            (1, 2, 3)
        );
        assert!(ChildLimits::from_args(&args[..2]).is_none());
    }
}
