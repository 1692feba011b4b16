//! The client against two CMIs started in-process: routing, parallel multi-key calls, RETRY
//! backoff, ABORT propagation, all-or-nothing commits across CMIs, and unreachable CMIs.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cads_client::{Client, ClientConfig, ClientError, IqRead, RangeSource, Write};
use cads_testkit::Cmis;

fn ranges() -> Arc<dyn RangeSource> {
    let next = Arc::new(AtomicU64::new(1));
    Arc::new(move || -> Range<u64> {
        let start = next.fetch_add(1000, Ordering::Relaxed);
        start..start + 1000
    })
}

struct Cluster {
    cmis: Cmis,
    client: Client,
}

fn cluster(mode: &str) -> Cluster {
    let cmis = Cmis::start(2, mode);
    let client = Client::new(ClientConfig::new(cmis.addrs().to_vec()), ranges());
    Cluster { cmis, client }
}

/// A key that the client routes to `cmi`.
fn key_on(client: &Client, cmi: usize, tag: &str) -> Vec<u8> {
    (0..)
        .map(|i| format!("{tag}{i}").into_bytes())
        .find(|k| client.route(k) == cmi)
        .unwrap()
}

#[test]
fn exists_and_strlen_at_answer_per_place_in_one_round_trip() {
    let c = cluster("write-through");
    let (a, b) = (key_on(&c.client, 0, "a"), key_on(&c.client, 1, "b"));
    c.client.set(&a, b"four").unwrap();
    let places: Vec<(usize, &[u8])> = vec![(0, &a), (1, &b), (1, &a)];
    let before = c.client.round_trips();
    let lengths: Vec<usize> = c
        .client
        .strlen_at(&places)
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(lengths, vec![4, 0, 0], "a is on CMI 0 only");
    let exists: Vec<bool> = c
        .client
        .exists_at(&places)
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(exists, vec![true, false, false]);
    assert_eq!(c.client.round_trips() - before, 2);
}

#[test]
fn a_session_spanning_two_cmis_commits_on_both() {
    let c = cluster("write-through");
    let (a, b) = (key_on(&c.client, 0, "a"), key_on(&c.client, 1, "b"));
    c.client.set(&a, b"1").unwrap();
    c.client.set(&b, b"2").unwrap();
    let mut s = c.client.session();
    assert_eq!(
        s.mget(&[&a, &b], true).unwrap(),
        vec![Some(b"1".to_vec()), Some(b"2".to_vec())]
    );
    s.mset(&[(&a, b"10"), (&b, b"20")], false).unwrap();
    assert_eq!(s.cmis_with_leases(), vec![0, 1]);
    assert_eq!(
        c.client.get(&a).unwrap(),
        Some(b"1".to_vec()),
        "private until commit"
    );
    s.commit().unwrap();
    assert_eq!(c.client.get(&a).unwrap(), Some(b"10".to_vec()));
    assert_eq!(c.client.get(&b).unwrap(), Some(b"20".to_vec()));
}

#[test]
fn an_abort_on_one_cmi_aborts_everywhere_and_nothing_lands() {
    let c = cluster("write-through");
    let (a, b) = (key_on(&c.client, 0, "a"), key_on(&c.client, 1, "b"));
    c.client.set(&a, b"1").unwrap();
    c.client.set(&b, b"1").unwrap();
    let mut s = c.client.session();
    s.set(&a, b"changed", false).unwrap();
    assert_eq!(s.get(&b, false).unwrap(), Some(b"1".to_vec()));
    // Another session voids s's shared lease on CMI 1 before s validates.
    let mut writer = c.client.session();
    assert!(writer.delete(&b).unwrap());
    writer.commit().unwrap();
    assert!(matches!(s.commit(), Err(ClientError::Aborted { .. })));
    assert_eq!(
        c.client.get(&a).unwrap(),
        Some(b"1".to_vec()),
        "nothing landed on CMI 0"
    );
    // And s's exclusive lease on CMI 0 is gone: another session can take it at once.
    let mut next = c.client.session();
    assert_eq!(next.get(&a, true).unwrap(), Some(b"1".to_vec()));
    next.commit().unwrap();
}

#[test]
fn commit_first_commits_the_others_only_once_the_first_did() {
    let c = cluster("write-through");
    let (a, b) = (key_on(&c.client, 0, "a"), key_on(&c.client, 1, "b"));
    let mut s = c.client.session();
    s.mset(&[(&a, b"1"), (&b, b"1")], false).unwrap();
    s.commit_first(&[1]).unwrap();
    assert_eq!(c.client.get(&a).unwrap(), Some(b"1".to_vec()));
    assert_eq!(c.client.get(&b).unwrap(), Some(b"1".to_vec()));

    let mut s = c.client.session();
    s.mset(&[(&a, b"2"), (&b, b"2")], false).unwrap();
    s.validate().unwrap();
    // CMI 1 ends every session (a flush): its commit is refused, so CMI 0's never happens.
    c.client.flush_cmi(1, true).unwrap();
    let err = s.commit_first(&[1]).unwrap_err();
    assert!(matches!(err, ClientError::Aborted { .. }), "{err}");
    assert_eq!(
        c.client.get(&a).unwrap(),
        Some(b"1".to_vec()),
        "nothing landed on CMI 0"
    );
}

#[test]
fn retry_backs_off_until_the_filler_commits() {
    let c = cluster("write-through");
    let key = key_on(&c.client, 0, "k");
    let mut filler = c.client.session();
    assert_eq!(
        filler.get(&key, false).unwrap(),
        None,
        "a miss: this session fills"
    );
    std::thread::scope(|scope| {
        let reader = scope.spawn(|| {
            let mut s = c.client.session();
            let value = s.get(&key, false).unwrap();
            s.commit().unwrap();
            value
        });
        std::thread::sleep(Duration::from_millis(50));
        filler.set(&key, b"filled", false).unwrap();
        filler.commit().unwrap();
        // Only the filler's commit makes the value: the reader backed off until then.
        assert_eq!(reader.join().unwrap(), Some(b"filled".to_vec()));
    });
}

#[test]
fn iq_reads_fill_once() {
    let c = cluster("write-around");
    let key = key_on(&c.client, 1, "profile");
    let mut s = c.client.session();
    assert_eq!(s.iq_get(&key).unwrap(), IqRead::Miss { marker: false });
    assert!(s.iq_set(&key, b"v").unwrap());
    s.commit().unwrap();
    let mut t = c.client.session();
    assert_eq!(t.iq_get(&key).unwrap(), IqRead::Hit(b"v".to_vec()));
    // A writer's Q lease voids a reader's I lease: the late fill is refused.
    c.client.delete(&key).unwrap();
    let mut reader = c.client.session();
    assert_eq!(reader.iq_get(&key).unwrap(), IqRead::Miss { marker: false });
    let mut writer = c.client.session();
    assert!(!writer.qareg(&key).unwrap());
    assert!(!reader.iq_set(&key, b"stale").unwrap());
    writer.dar(&key, cads_protocol::MarkOp::Keep).unwrap();
    writer.commit().unwrap();
    assert_eq!(c.client.get(&key).unwrap(), None);
}

/// Gemini's repair of a dirty key (004 Algorithm 3): delete under the I lease, then overwrite
/// from the secondary, or release.
#[test]
fn iset_then_iq_set_or_idelete_repairs_a_key() {
    let c = cluster("write-through");
    c.client.set(b"dirty", b"stale").unwrap();
    let mut s = c.client.session();
    assert!(!s.iset(b"dirty").unwrap(), "no marker");
    assert_eq!(c.client.get(b"dirty").unwrap(), None);
    assert!(s.iq_set(b"dirty", b"fresh").unwrap());
    assert_eq!(c.client.get(b"dirty").unwrap(), Some(b"fresh".to_vec()));

    let mut s = c.client.session();
    s.iset(b"dirty").unwrap();
    assert!(s.idelete(b"dirty").unwrap());
    assert_eq!(c.client.get(b"dirty").unwrap(), None);
    let mut next = c.client.session();
    assert!(
        matches!(next.iq_get(b"dirty").unwrap(), IqRead::Miss { .. }),
        "free again"
    );
}

#[test]
fn dropping_a_session_aborts_it() {
    let c = cluster("write-through");
    let key = key_on(&c.client, 0, "k");
    c.client.set(&key, b"1").unwrap();
    {
        let mut s = c.client.session();
        s.set(&key, b"2", false).unwrap();
    }
    assert_eq!(c.client.get(&key).unwrap(), Some(b"1".to_vec()));
    let mut s = c.client.session();
    assert_eq!(
        s.get(&key, true).unwrap(),
        Some(b"1".to_vec()),
        "the lease was released"
    );
}

#[test]
fn an_unreachable_cmi_is_reported_as_unavailable() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let client = Client::new(ClientConfig::new(vec![port]), ranges());
    let err = client.get(b"k").unwrap_err();
    assert!(err.is_unavailable(), "{err}");
    let mut s = client.session();
    assert!(s.get(b"k", false).unwrap_err().is_unavailable());
}

/// The last writes and the commit go in one round trip, and a CMI that ended the session
/// meanwhile, or that refuses a write, leaves the other CMI's writes landed (`PartialCommit`).
#[test]
fn write_and_commit_lands_per_cmi_in_one_round_trip() {
    let c = cluster("write-through");
    let (a, b) = (key_on(&c.client, 0, "a"), key_on(&c.client, 1, "b"));
    c.client.set(&a, b"1").unwrap();
    c.client.set(&b, b"1").unwrap();
    let deletes = |keys: &[&Vec<u8>]| -> Vec<(usize, Write)> {
        keys.iter()
            .map(|k| (c.client.route(k), Write::Delete { key: k.to_vec() }))
            .collect()
    };
    // The CMIs a `PartialCommit` names: (committed, failed).
    let partial = |err: ClientError| match err {
        ClientError::PartialCommit { committed, failed } => (committed, failed),
        other => panic!("not a partial commit: {other}"),
    };
    let incr_a = || Write::Incr {
        key: a.clone(),
        delta: 1,
    };

    let mut s = c.client.session();
    s.mget(&[&a, &b], true).unwrap();
    let before = c.client.round_trips();
    s.write_and_commit(&deletes(&[&a, &b])).unwrap();
    assert_eq!(c.client.round_trips() - before, 1);
    assert_eq!(
        (c.client.get(&a).unwrap(), c.client.get(&b).unwrap()),
        (None, None)
    );

    c.client.set(&a, b"2").unwrap();
    c.client.set(&b, b"2").unwrap();
    let mut s = c.client.session();
    s.mget(&[&a, &b], true).unwrap();
    c.client.flush_cmi(1, true).unwrap();
    c.client.set(&b, b"3").unwrap();
    let err = s.write_and_commit(&deletes(&[&a, &b])).unwrap_err();
    assert_eq!(partial(err), (vec![0], vec![1]));
    assert_eq!(c.client.get(&a).unwrap(), None, "CMI 0 took its delete");
    assert_eq!(
        c.client.get(&b).unwrap(),
        Some(b"3".to_vec()),
        "CMI 1 refused"
    );

    // A write CMI 0 refuses (not an integer) does not stop its commit, nor CMI 1's.
    c.client.set(&a, b"x").unwrap();
    c.client.set(&b, b"1").unwrap();
    let s = c.client.session();
    let writes = vec![(0, incr_a()), (1, Write::Delete { key: b.clone() })];
    let err = s.write_and_commit(&writes).unwrap_err();
    assert_eq!(partial(err), (vec![1], vec![0]));
    assert_eq!(c.client.get(&b).unwrap(), None, "CMI 1 took its delete");
    // And no lease is left behind on CMI 0.
    let mut next = c.client.session();
    assert_eq!(next.get(&a, true).unwrap(), Some(b"x".to_vec()));
    next.commit().unwrap();

    // On one CMI alone: its commit lands with the delete, though it counts as failed.
    let d = key_on(&c.client, 0, "d");
    c.client.set(&d, b"1").unwrap();
    let s = c.client.session();
    let writes = vec![(0, incr_a()), (0, Write::Delete { key: d.clone() })];
    let err = s.write_and_commit(&writes).unwrap_err();
    assert_eq!(partial(err), (vec![], vec![0]));
    assert_eq!(
        c.client.get(&d).unwrap(),
        None,
        "CMI 0 committed its delete"
    );

    // Refused everywhere: `Aborted`, and nothing lands.
    c.client.set(&a, b"4").unwrap();
    let mut s = c.client.session();
    s.mget(&[&a, &b], true).unwrap();
    c.client.flush_cmi(0, true).unwrap();
    c.client.flush_cmi(1, true).unwrap();
    c.client.set(&a, b"5").unwrap();
    let err = s.write_and_commit(&deletes(&[&a, &b])).unwrap_err();
    assert!(matches!(err, ClientError::Aborted { .. }), "{err}");
    assert_eq!(c.client.get(&a).unwrap(), Some(b"5".to_vec()));
}

#[test]
fn round_trips_are_counted_once_per_wait() {
    let c = cluster("write-through");
    let (a, b) = (key_on(&c.client, 0, "a"), key_on(&c.client, 1, "b"));
    let before = c.client.round_trips();
    let mut s = c.client.session();
    s.mget(&[&a, &b], false).unwrap();
    s.commit().unwrap();
    // One parallel LMGET to both CMIs, one validate to both, one commit to both.
    assert_eq!(c.client.round_trips() - before, 3);
    let before = c.client.round_trips();
    c.client.get(&a).unwrap();
    assert_eq!(c.client.round_trips() - before, 1);
}

#[test]
fn a_session_can_keep_a_key_on_several_cmis() {
    let c = cluster("write-through");
    let key = b"replicated".to_vec();
    let mut s = c.client.session();
    for cmi in [0, 1] {
        s.on(cmi, |s| s.set(&key, b"v", true)).unwrap();
    }
    assert_eq!(s.cmis_with_leases(), vec![0, 1]);
    s.commit().unwrap();
    for cmi in 0..2 {
        let reply = c
            .client
            .execute(cmi, &cads_protocol::Command::Get(&key))
            .unwrap();
        assert_eq!(
            reply,
            cads_protocol::Reply::owned_bulk(b"v".to_vec()),
            "CMI {cmi}"
        );
    }
}

/// A batch whose request to one CMI cannot be sent must not leave the request already written to
/// another CMI with its reply unread on a pooled connection: the next user of that connection
/// would read it as its own.
#[test]
fn a_failed_batch_leaves_no_unread_reply_behind() {
    let c = cluster("write-through");
    let live = c.cmis.addrs()[0];
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let client = Client::new(ClientConfig::new(vec![live, dead]), ranges());
    let (a, b) = (key_on(&client, 0, "a"), key_on(&client, 1, "b"));
    client.set(&a, b"value-of-a").unwrap();
    for _ in 0..5 {
        let mut s = client.session();
        assert!(s.mget(&[&a, &b], false).is_err());
        drop(s);
        assert_eq!(client.get(&a).unwrap(), Some(b"value-of-a".to_vec()));
        assert_eq!(
            client
                .execute(0, &cads_protocol::Command::Ping(None))
                .unwrap(),
            cads_protocol::Reply::status("PONG")
        );
    }
}

/// Many commands for few CMIs: each CMI's commands share one pipelined connection (a batch of
/// hundreds of keys must not open hundreds of connections), and replies come back in order.
#[test]
fn a_batch_pipelines_each_cmis_commands_on_one_connection() {
    use cads_protocol::{Command, Reply};
    let c = cluster("write-through");
    let keys: Vec<Vec<u8>> = (0..200).map(|i| format!("k{i}").into_bytes()).collect();
    let values: Vec<Vec<u8>> = (0..200).map(|i| format!("v{i}").into_bytes()).collect();
    let pairs: Vec<[&[u8]; 2]> = keys
        .iter()
        .zip(&values)
        .map(|(k, v)| [k.as_slice(), v.as_slice()])
        .collect();
    let sets: Vec<(usize, Command<'_>)> = pairs
        .iter()
        .map(|pair| (c.client.route(pair[0]), Command::MSet(pair)))
        .collect();
    for reply in c.client.execute_many(&sets) {
        assert_eq!(reply.unwrap(), Reply::status("OK"));
    }
    let gets: Vec<(usize, Command<'_>)> = keys
        .iter()
        .map(|k| (c.client.route(k), Command::Get(k.as_slice())))
        .collect();
    let replies = c.client.execute_many(&gets);
    for (reply, value) in replies.into_iter().zip(&values) {
        assert_eq!(reply.unwrap(), Reply::owned_bulk(value.clone()));
    }
    for cmi in 0..2 {
        let section: [&[u8]; 1] = [b"clients"];
        let info = match c.client.execute(cmi, &Command::Info(&section)) {
            Ok(Reply::Bulk(text)) => String::from_utf8_lossy(&text).into_owned(),
            other => panic!("INFO: {other:?}"),
        };
        let connected: u64 = info
            .lines()
            .find_map(|l| l.strip_prefix("connected_clients:"))
            .and_then(|n| n.trim().parse().ok())
            .expect("connected_clients in INFO");
        assert!(connected <= 2, "CMI {cmi}: {connected} connections");
    }
}

/// Gemini: a session names the configuration it routes by; a CMI that knows a newer one refuses
/// it, naming the newer id, from its next command on (and a new session's first command); one
/// that knows an older one was not told and is fenced.
#[test]
fn a_session_routed_by_an_older_configuration_is_refused_with_the_newer_id() {
    use cads_protocol::{Command, Reply};
    let c = cluster("write-around");
    for cmi in 0..2 {
        for cmd in [
            Command::ConfigId(Some(5)),
            Command::Fragments(Some(4)),
            Command::InstanceLease {
                until: Some(i64::MAX as u64),
                boot: None,
            },
        ] {
            assert_eq!(c.client.execute(cmi, &cmd).unwrap(), Reply::OK);
        }
    }
    let (a, b) = (key_on(&c.client, 0, "a"), key_on(&c.client, 1, "b"));
    let mut s = c.client.session();
    s.set_configuration(5);
    assert_eq!(s.mget(&[&a, &b], false).unwrap(), vec![None, None]);
    c.client.execute(1, &Command::ConfigId(Some(6))).unwrap();
    assert!(matches!(
        s.get(&b, false),
        Err(ClientError::StaleConfiguration { latest: 6 })
    ));
    drop(s);

    let mut s = c.client.session();
    s.set_configuration(5);
    assert_eq!(s.get(&a, false).unwrap(), None, "CMI 0 knows no newer one");
    assert!(matches!(
        s.get(&b, false),
        Err(ClientError::StaleConfiguration { latest: 6 })
    ));
    drop(s);
    let mut s = c.client.session();
    s.set_configuration(6);
    assert!(
        matches!(s.get(&a, false), Err(ClientError::Fenced)),
        "CMI 0 was not told of configuration 6"
    );
    drop(s);
    c.client.execute(0, &Command::ConfigId(Some(6))).unwrap();
    let mut s = c.client.session();
    s.set_configuration(6);
    assert_eq!(s.mget(&[&a, &b], false).unwrap(), vec![None, None]);
}

/// A CMI that answers each request with the next of `replies` (RESP text), after the
/// connection's opening `FLUSHALL RESTORED`; returns its address and the requests' names.
fn scripted_cmi(
    replies: Vec<&'static str>,
) -> (std::net::SocketAddr, std::sync::mpsc::Receiver<String>) {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (names, seen) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut out = stream.try_clone().unwrap();
        let mut input = BufReader::new(stream);
        let mut replies = std::iter::once("+OK\r\n").chain(replies);
        let mut line = String::new();
        // Each request is an array of bulk strings: `*N`, then `$len` and the bytes, N times.
        while input.read_line(&mut line).unwrap_or(0) > 0 {
            let parts: usize = line.trim_end().trim_start_matches('*').parse().unwrap();
            let mut name = String::new();
            for part in 0..parts {
                line.clear();
                input.read_line(&mut line).unwrap();
                let len: usize = line.trim_end().trim_start_matches('$').parse().unwrap();
                let mut bytes = vec![0; len + 2];
                std::io::Read::read_exact(&mut input, &mut bytes).unwrap();
                if part == 0 {
                    name = String::from_utf8_lossy(&bytes[..len]).to_uppercase();
                }
            }
            line.clear();
            let _ = names.send(name);
            let Some(reply) = replies.next() else { return };
            out.write_all(reply.as_bytes()).unwrap();
        }
    });
    (addr, seen)
}

/// Two writes of one key in one pipeline, the first answered RETRY and the second granted (the
/// key's holder committed between them: the pipeline reached the CMI in two reads). The second
/// went ahead of the first, which it may depend on (LADD of a header, then LAPPEND to it), so
/// the session aborts rather than send the first again.
#[test]
fn a_write_that_overtakes_an_earlier_write_of_its_key_aborts_the_session() {
    use cads_client::Write;
    let (addr, seen) = scripted_cmi(vec![
        "-RETRY key k is held by an older session\r\n",
        ":7\r\n",
        "+OK\r\n",
        "+OK\r\n",
    ]);
    let client = Client::new(ClientConfig::new(vec![addr]), ranges());
    let mut session = client.session();
    let writes = [
        (
            0,
            Write::Add {
                key: b"k".to_vec(),
                value: b"head\n".to_vec(),
                pin: true,
            },
        ),
        (
            0,
            Write::Append {
                key: b"k".to_vec(),
                bytes: b"line\n".to_vec(),
            },
        ),
    ];
    match session.write_at(&writes, true) {
        Err(ClientError::Aborted { reason }) => assert!(reason.contains("went ahead"), "{reason}"),
        other => panic!("{other:?}"),
    }
    let names: Vec<String> = (0..5)
        .map(|_| seen.recv_timeout(Duration::from_secs(60)).unwrap())
        .collect();
    assert_eq!(
        names,
        ["FLUSHALL", "LADD", "LAPPEND", "LVALIDATE", "LABORT"]
    );
}
