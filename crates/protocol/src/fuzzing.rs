//! Checks of the RESP parsers and the command set driven by arbitrary bytes, for the cargo-fuzz
//! targets in `fuzz/` and for the corpus replay tests on stable Rust (`tests/fuzz_corpus.rs` here
//! and in `cads-engine`). Compiled only with the `fuzzing` feature: nothing here is part of a
//! server or client build.
//!
//! Every check panics when it finds a bug and returns normally otherwise:
//!
//! - [`check_request_bytes`]: the bytes are a client's stream. It is parsed the way a CMI reads it
//!   (parse, consume, go on) under small and default limits; every request is re-encoded and
//!   re-parsed, every prefix of it must read as incomplete (never as an error, and never asking for
//!   more bytes than the request has), it must parse the same when delivered in pieces (one byte
//!   at a time, or cut in two) to a resumable `RequestParser`, and every command parsed from it
//!   must survive `Command::to_args`. The same bytes go through `parse_reply` as a server's
//!   stream.
//! - [`check_command_round_trip`] and [`check_reply_round_trip`]: one command or reply, for other
//!   crates' checks that produce them (the engine's).
//!
//! [`assert_corpora_pass`] runs a check over the committed corpora of fuzz targets.

use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use crate::resp::{
    parse_reply, parse_request, reply_extent, write_reply_as, write_request, Protocol, ReplyExtent,
    RequestParser,
};
use crate::{Command, Limits, Parsed, Reply};

/// The fuzz target of this crate, with its corpus directory `fuzz/corpus/request_parser/`.
pub const REQUEST_PARSER: &str = "request_parser";

/// The committed corpus of a fuzz target: `fuzz/corpus/<target>/` of the repository.
fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target)
}

/// Replays the committed corpus of each of `targets` through `check(target, input)` and panics,
/// listing the inputs that failed, unless every input of every (non-empty) corpus passes. For the
/// corpus replay tests.
pub fn assert_corpora_pass(targets: &[&str], check: impl Fn(&str, &[u8])) {
    let mut count = 0;
    let mut failures = Vec::new();
    for target in targets {
        let (n, failed) = replay_corpus(&corpus_dir(target), |data| check(target, data));
        assert!(n > 0, "fuzz/corpus/{target}/ has inputs");
        count += n;
        failures.extend(failed);
    }
    assert!(
        failures.is_empty(),
        "{} of {count} corpus inputs fail (the panics are printed above):\n{}",
        failures.len(),
        failures.join("\n")
    );
    println!("{count} corpus inputs pass");
}

/// Runs `check` on every file of `dir` (in name order), catching panics. Returns how many files
/// there were and the paths of those whose check panicked (the panics are printed as they happen).
fn replay_corpus(dir: &Path, check: impl Fn(&[u8])) -> (usize, Vec<String>) {
    let mut files: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(read) => read
            .map(|e| e.expect("readable directory entry").path())
            .filter(|p| p.is_file())
            .collect(),
        Err(_) => Vec::new(),
    };
    files.sort();
    let mut failures = Vec::new();
    for file in &files {
        let data = std::fs::read(file).expect("readable corpus file");
        if catch_unwind(AssertUnwindSafe(|| check(&data))).is_err() {
            failures.push(file.display().to_string());
        }
    }
    (files.len(), failures)
}

/// Small limits, so that the limit paths are reachable with short inputs.
fn small_limits() -> Limits {
    Limits {
        max_bulk: 64,
        max_args: 8,
        max_inline: 64,
        unauthenticated: false,
    }
}

/// Parses `data` as a client's byte stream, and as a server's reply stream; panics on a bug.
pub fn check_request_bytes(data: &[u8]) {
    check_request_stream(data, &small_limits());
    check_request_stream(data, &Limits::default());
    check_reply_stream(data);
}

fn check_request_stream(data: &[u8], limits: &Limits) {
    let mut ranges: Vec<Range<usize>> = Vec::new();
    // One parser for the whole stream, as a connection keeps one: handed each request whole, it
    // must read what the stateless parser reads, whatever it parsed before.
    let mut stream = RequestParser::default();
    let mut pos = 0;
    while pos < data.len() {
        let rest = &data[pos..];
        let parsed = parse_request(rest, limits, &mut ranges);
        let resumed = stream.parse(rest, limits);
        assert_eq!(resumed, parsed, "a reused parser reads the same");
        if let Ok(Parsed::Request { .. }) = parsed {
            assert_eq!(
                stream.args(),
                &ranges[..],
                "a reused parser finds the same arguments"
            );
        }
        check_split_delivery(rest, limits);
        match parsed {
            Ok(Parsed::Request { consumed }) => {
                assert!(
                    consumed > 0 && consumed <= rest.len(),
                    "consumed {consumed}"
                );
                assert!(
                    !ranges.is_empty() && ranges.len() <= limits.max_args,
                    "{} arguments",
                    ranges.len()
                );
                for r in &ranges {
                    assert!(r.start <= r.end && r.end <= consumed, "range {r:?}");
                    assert!(r.len() <= limits.max_bulk, "argument within max_bulk");
                }
                let args: Vec<Vec<u8>> = ranges.iter().map(|r| rest[r.clone()].to_vec()).collect();
                check_prefixes(rest, consumed, limits);
                check_reencoded(&args, limits);
                check_command(&args);
                pos += consumed;
            }
            Ok(Parsed::Inline { consumed, args }) => {
                assert!(
                    consumed > 0 && consumed <= rest.len(),
                    "consumed {consumed}"
                );
                assert!(!args.is_empty(), "an inline request has arguments");
                assert!(args.len() <= limits.max_args, "{} arguments", args.len());
                assert_eq!(rest[consumed - 1], b'\n', "an inline request ends a line");
                check_prefixes(rest, consumed, limits);
                // Inline arguments are not bounded by max_bulk; re-encode under default limits.
                check_reencoded(&args, &Limits::default());
                check_command(&args);
                pos += consumed;
            }
            Ok(Parsed::Empty { consumed }) => {
                assert!(
                    consumed > 0 && consumed <= rest.len(),
                    "consumed {consumed}"
                );
                check_prefixes(rest, consumed, limits);
                pos += consumed;
            }
            Ok(Parsed::Incomplete { needed }) => {
                assert!(
                    needed > rest.len(),
                    "incomplete with {} bytes, yet asks for {needed}",
                    rest.len()
                );
                break;
            }
            // A protocol error closes the connection: nothing after it is read.
            Err(_) => break,
        }
    }
}

/// The front of `rest` delivered in pieces to one [`RequestParser`], as a connection's reads
/// deliver it: after every piece the parser must answer exactly what the stateless parser answers
/// for the bytes so far (the same `Incomplete { needed }`, the same request and arguments, the
/// same error), until the request is read or refused. Requests up to 1 KiB are delivered one byte
/// at a time, so a request split at any byte parses to the same command; longer ones in pieces of
/// a few bytes, and in two pieces cut at each of the prefix cuts.
fn check_split_delivery(rest: &[u8], limits: &Limits) {
    let whole = parse_request(rest, limits, &mut Vec::new());
    let end = match &whole {
        Ok(
            Parsed::Request { consumed }
            | Parsed::Inline { consumed, .. }
            | Parsed::Empty { consumed },
        ) => *consumed,
        // Bytes up to where the stateless parser gave up (or all of them) are fed.
        _ => rest.len(),
    };
    let step = 1 + end / 1024;
    let mut stops: Vec<usize> = (1..=end).step_by(step).collect();
    stops.push(end);
    deliver(rest, limits, &stops);
    for cut in [
        1,
        end / 3,
        end / 2,
        end.saturating_sub(2),
        end.saturating_sub(1),
    ] {
        if cut > 0 && cut < end {
            deliver(rest, limits, &[cut, end]);
        }
    }
}

/// Feeds `rest[..stop]` for each stop in turn to one parser, comparing each answer with the
/// stateless parser's on the same bytes; stops at the first answer that is not `Incomplete`.
fn deliver(rest: &[u8], limits: &Limits, stops: &[usize]) {
    let mut parser = RequestParser::default();
    let mut expected_args = Vec::new();
    for &stop in stops {
        let bytes = &rest[..stop];
        let resumed = parser.parse(bytes, limits);
        let expected = parse_request(bytes, limits, &mut expected_args);
        assert_eq!(
            resumed, expected,
            "{stop} bytes delivered in pieces (stops {stops:?}) read differently"
        );
        if !matches!(expected, Ok(Parsed::Incomplete { .. })) {
            if let Ok(Parsed::Request { .. }) = expected {
                assert_eq!(parser.args(), &expected_args[..], "the same arguments");
            }
            return;
        }
    }
}

/// Every strict prefix of a request that parses in `consumed` bytes must read as incomplete, and
/// must not ask for more bytes than the request has (or a client waiting for its reply would wait
/// forever).
fn check_prefixes(rest: &[u8], consumed: usize, limits: &Limits) {
    let mut cuts: Vec<usize> = if consumed <= 40 {
        (0..consumed).collect()
    } else {
        let mut c: Vec<usize> = (0..8).map(|i| i * consumed / 8).collect();
        c.extend([1, 2, 3, consumed - 3, consumed - 2, consumed - 1]);
        c
    };
    cuts.sort_unstable();
    cuts.dedup();
    let mut ranges = Vec::new();
    for cut in cuts {
        match parse_request(&rest[..cut], limits, &mut ranges) {
            Ok(Parsed::Incomplete { needed }) => assert!(
                needed > cut && needed <= consumed,
                "a prefix of {cut} of a {consumed}-byte request asks for {needed} bytes"
            ),
            other => panic!("a prefix of {cut} of a {consumed}-byte request parses as {other:?}"),
        }
    }
}

/// Arguments written as a client writes them parse back to themselves.
fn check_reencoded(args: &[Vec<u8>], limits: &Limits) {
    let mut encoded = Vec::new();
    write_request(&mut encoded, args);
    let mut ranges = Vec::new();
    match parse_request(&encoded, limits, &mut ranges) {
        Ok(Parsed::Request { consumed }) => {
            assert_eq!(
                consumed,
                encoded.len(),
                "a re-encoded request is read whole"
            );
            let again: Vec<&[u8]> = ranges.iter().map(|r| &encoded[r.clone()]).collect();
            assert_eq!(again, args, "a re-encoded request reads the same");
        }
        other => panic!("a re-encoded request parses as {other:?}"),
    }
}

/// Parses a command from arguments and checks that it round-trips through `to_args`.
fn check_command(args: &[Vec<u8>]) {
    let slices: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
    if let Ok(cmd) = Command::parse(&slices) {
        check_command_round_trip(&cmd);
    }
}

pub fn check_command_round_trip(cmd: &Command<'_>) {
    assert!(
        cmd.spec().arity_ok(cmd.to_args().len()),
        "to_args fits the arity"
    );
    let owned: Vec<Vec<u8>> = cmd.to_args().into_iter().map(|a| a.into_owned()).collect();
    let slices: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
    match Command::parse(&slices) {
        Ok(again) => assert_eq!(
            format!("{again:?}"),
            format!("{cmd:?}"),
            "a command survives to_args"
        ),
        Err(e) => panic!("{cmd:?} became {owned:?}, which does not parse: {e}"),
    }
}

/// Parses `data` as replies, as a client reads them; each reply, written (in RESP2 and RESP3) and
/// read back, is stable.
fn check_reply_stream(data: &[u8]) {
    let mut pos = 0;
    while pos < data.len() {
        let parsed = parse_reply(&data[pos..]);
        let extent = reply_extent(&data[pos..]);
        match (&parsed, extent) {
            (Ok(Some((_, used))), Ok(ReplyExtent::Whole(end))) => assert_eq!(*used, end),
            (Ok(None), Ok(ReplyExtent::Short { needs })) => assert!(needs > data.len() - pos),
            (Err(_), Err(_)) => {}
            (parsed, extent) => panic!("parsed {parsed:?} but walked {extent:?}"),
        }
        let Ok(Some((reply, used))) = parsed else {
            break;
        };
        assert!(used > 0 && used <= data.len() - pos, "used {used}");
        check_reply_round_trip(&reply);
        pos += used;
    }
}

/// A reply written in either dialect reads back whole, writing what was read gives the same bytes,
/// and every strict prefix of the bytes reads as incomplete.
pub fn check_reply_round_trip(reply: &Reply<'_>) {
    for protocol in [Protocol::Resp2, Protocol::Resp3] {
        let mut encoded = Vec::new();
        write_reply_as(&mut encoded, reply, protocol);
        let (again, used) = match parse_reply(&encoded) {
            Ok(Some(parsed)) => parsed,
            other => panic!("{reply:?} written as {encoded:?} parses as {other:?}"),
        };
        assert_eq!(used, encoded.len(), "a written reply is read whole");
        let mut twice = Vec::new();
        write_reply_as(&mut twice, &again, protocol);
        assert_eq!(twice, encoded, "writing a reply read back is stable");
        assert_eq!(
            reply_extent(&encoded),
            Ok(ReplyExtent::Whole(encoded.len()))
        );
        for cut in [0, 1, encoded.len() / 2, encoded.len() - 1] {
            if cut < encoded.len() {
                assert_eq!(
                    parse_reply(&encoded[..cut]),
                    Ok(None),
                    "prefix {cut} of {encoded:?}"
                );
                match reply_extent(&encoded[..cut]) {
                    Ok(ReplyExtent::Short { needs }) => assert!(
                        cut < needs && needs <= encoded.len(),
                        "prefix {cut} of {encoded:?} needs {needs}"
                    ),
                    other => panic!("prefix {cut} of {encoded:?} walked as {other:?}"),
                }
            }
        }
    }
}
