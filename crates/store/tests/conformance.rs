//! The conformance suite: one set of checks run against every backend, so that callers see the same
//! behaviour whichever store they use.
//!
//! SQLite (a temporary file per test) always runs. PostgreSQL (`CADS_POSTGRES_URL`, default
//! `postgres://cads:cads@127.0.0.1:5432/cads`) and MariaDB/MySQL (`CADS_MYSQL_URL`, default
//! `mysql://cads:cads@127.0.0.1:3306/cads`) run when reachable; otherwise each of their tests prints a
//! loud `SKIPPED:` line and passes, or fails when `CADS_REQUIRE_SERVICES=1`. `scripts/provision`
//! starts both. Every test uses collection and table names of its own, so tests run concurrently
//! and leave nothing behind.

use std::io::Write as _;
use std::net::{TcpListener, TcpStream};
use std::ops::Bound::{self, Excluded, Included, Unbounded};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use cads_store::{
    open, Change, Changes, DataStore, Dialect, Document, DocumentStore, FaultMode, FaultyStore,
    IndexedField, Isolation, Op, SqlStore, SqlTransaction, SqlValue, StoreError, StoreOptions,
};
use cads_testkit::scratch::StoreServer;
use serde_json::{json, Value};

// ---------------------------------------------------------------------------------------------
// Backends and per-test context
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Sqlite,
    Postgres,
    MySql,
}

impl Kind {
    /// The server behind a server kind.
    fn server(self) -> StoreServer {
        match self {
            Kind::Postgres => StoreServer::Postgres,
            Kind::MySql => StoreServer::MariaDb,
            Kind::Sqlite => unreachable!("SQLite uses a file per test"),
        }
    }
}

/// Whether the server of `kind` is reachable; if not, skips loudly (once per backend) or fails.
fn reachable(kind: Kind) -> bool {
    kind == Kind::Sqlite || kind.server().reachable()
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A unique name for this test's tables: `c<pid>_<n>_<tag>`.
fn unique(tag: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    let mut name = format!("c{}_{n}_{tag}", std::process::id());
    name.truncate(40);
    name
}

struct Ctx {
    kind: Kind,
    url: String,
    store: Arc<dyn DataStore>,
    collections: Mutex<Vec<String>>,
    tables: Mutex<Vec<String>>,
    sqlite_file: Option<std::path::PathBuf>,
}

impl Ctx {
    fn new(kind: Kind) -> Option<Ctx> {
        if !reachable(kind) {
            return None;
        }
        let (url, sqlite_file) = match kind {
            Kind::Sqlite => {
                let path = std::env::temp_dir().join(format!("{}.db", unique("sqlite")));
                (format!("sqlite:{}", path.display()), Some(path))
            }
            _ => (kind.server().url(), None),
        };
        let store = open(&url, &StoreOptions::default()).expect("open the store");
        Some(Ctx {
            kind,
            url,
            store,
            collections: Mutex::new(Vec::new()),
            tables: Mutex::new(Vec::new()),
            sqlite_file,
        })
    }

    fn dialect(&self) -> Dialect {
        self.store.dialect()
    }

    /// Another store on the same database, with these options.
    fn open_with(&self, options: StoreOptions) -> Arc<dyn DataStore> {
        open(&self.url, &options).expect("open a second store")
    }

    /// A new collection of this test, dropped at the end.
    fn coll(&self, tag: &str, indexed: &[IndexedField]) -> String {
        let name = unique(tag);
        self.store
            .create_collection(&name, indexed)
            .expect("create collection");
        self.collections.lock().unwrap().push(name.clone());
        name
    }

    /// A table name of this test; the table (if created) is dropped at the end, later ones first.
    fn table(&self, tag: &str) -> String {
        let name = unique(tag);
        self.tables.lock().unwrap().push(name.clone());
        name
    }

    fn bytes_type(&self) -> &'static str {
        match self.dialect() {
            Dialect::Postgres => "BYTEA",
            Dialect::MySql => "LONGBLOB",
            Dialect::Sqlite => "BLOB",
        }
    }

    fn engine_suffix(&self) -> &'static str {
        match self.dialect() {
            Dialect::MySql => " ENGINE=InnoDB",
            _ => "",
        }
    }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        for name in self.collections.lock().unwrap().drain(..) {
            let _ = self.store.drop_collection(&name);
        }
        for name in self.tables.lock().unwrap().drain(..).rev() {
            let _ = self
                .store
                .execute_batch(&format!("DROP TABLE IF EXISTS {name}"));
        }
        if let Some(path) = &self.sqlite_file {
            let path = path.display().to_string();
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{path}{suffix}"));
            }
        }
    }
}

fn doc(v: Value) -> Document {
    v.as_object().expect("a JSON object").clone()
}

fn changes(v: Value) -> Changes {
    Changes::from_json(&v).expect("valid changes")
}

fn is_invalid<T: std::fmt::Debug>(r: Result<T, StoreError>) -> bool {
    matches!(r, Err(StoreError::Invalid(_)))
}

macro_rules! conformance {
    ($($check:ident),* $(,)?) => {
        mod sqlite {
            $( #[test] fn $check() { if let Some(cx) = super::Ctx::new(super::Kind::Sqlite) { super::$check(&cx) } } )*
        }
        mod postgres {
            $( #[test] fn $check() { if let Some(cx) = super::Ctx::new(super::Kind::Postgres) { super::$check(&cx) } } )*
        }
        mod mysql {
            $( #[test] fn $check() { if let Some(cx) = super::Ctx::new(super::Kind::MySql) { super::$check(&cx) } } )*
        }
    };
}

conformance!(
    operators_of_table_3_2,
    operators_on_missing_fields,
    type_errors_change_nothing,
    dotted_paths,
    idempotent_equivalent_through_the_store,
    random_updates_match_apply,
    update_of_missing_document,
    crud,
    documents_round_trip_exactly,
    get_many_in_order,
    documents_read_as_text,
    insert_many_bulk,
    write_batch_is_all_or_nothing,
    write_batch_matches_one_write_at_a_time,
    scan_by_id,
    scan_by_indexed_field,
    indexed_field_kinds_are_checked,
    collections,
    reserved_names_are_refused,
    crafted_catalog_rows_are_refused,
    ids_without_control_characters,
    document_limits_change_nothing,
    concurrent_inc_is_atomic,
    concurrent_push_keeps_every_element,
    many_threads_mixed,
    sql_commit_rollback_drop,
    sql_read_transactions_run_beside_a_writer,
    sql_parameters_round_trip,
    sql_dates_and_times_read_as_text,
    sql_unique_violation_is_constraint,
    sql_failed_statement_spoils_the_transaction,
    sql_statements_run_together_in_order,
    sql_foreign_key_violation_is_constraint,
    sql_serialization_conflict,
    lock_wait_is_bounded,
    long_statement_times_out,
    fault_fail_all,
    fault_hang,
    fault_refuse_writes_and_counts,
    server_that_stops_answering_times_out,
    called_from_an_async_runtime,
);

// ---------------------------------------------------------------------------------------------
// Change operators through the store
// ---------------------------------------------------------------------------------------------

/// 000 Table 3.2, row by row: the document, the change, whether it is idempotent, the result.
fn operators_of_table_3_2(cx: &Ctx) {
    let rows = [
        (
            json!({"field": "val"}),
            json!({"$set": {"field": "newVal"}}),
            true,
            json!({"field": "newVal"}),
        ),
        (
            json!({"field": "val"}),
            json!({"$unset": {"field": ""}}),
            true,
            json!({}),
        ),
        (
            json!({"field": 5}),
            json!({"$inc": {"field": 3}}),
            false,
            json!({"field": 8}),
        ),
        (
            json!({"field": ["a"]}),
            json!({"$addToSet": {"field": "b"}}),
            true,
            json!({"field": ["a", "b"]}),
        ),
        (
            json!({"field": ["a"]}),
            json!({"$push": {"field": "a"}}),
            false,
            json!({"field": ["a", "a"]}),
        ),
        (
            json!({"field": ["a", "b"]}),
            json!({"$pull": {"field": "a"}}),
            false,
            json!({"field": ["b"]}),
        ),
    ];
    let c = cx.coll("table32", &[]);
    for (i, (before, change, idempotent, after)) in rows.into_iter().enumerate() {
        let id = format!("d{i}");
        let ch = changes(change.clone());
        assert_eq!(ch.is_idempotent(), idempotent, "{change}");
        assert_eq!(ch.changes()[0].op.idempotent(), idempotent, "{change}");
        cx.store.insert(&c, &id, &doc(before)).unwrap();
        let got = cx
            .store
            .update(&c, &id, &ch)
            .unwrap()
            .expect("the document exists");
        assert_eq!(Value::Object(got), after, "{change}");
        assert_eq!(
            cx.store.get(&c, &id).unwrap().map(Value::Object),
            Some(after.clone()),
            "{change} stored"
        );
        // Applying again: idempotent operators change nothing more; $inc and $push do.
        let again = cx.store.update(&c, &id, &ch).unwrap().unwrap();
        assert_eq!(
            Value::Object(again) == after,
            idempotent || ch.changes()[0].op == Op::Pull,
            "{change} applied twice"
        );
    }
    // $pull is not idempotent either: replayed after a later $push, it removes what that added.
    cx.store
        .insert(&c, "pull", &doc(json!({"field": ["a", "b"]})))
        .unwrap();
    let pull = changes(json!({"$pull": {"field": "a"}}));
    cx.store.update(&c, "pull", &pull).unwrap();
    cx.store
        .update(&c, "pull", &changes(json!({"$push": {"field": "a"}})))
        .unwrap();
    let replayed = cx.store.update(&c, "pull", &pull).unwrap().unwrap();
    assert_eq!(
        Value::Object(replayed),
        json!({"field": ["b"]}),
        "the replay lost the pushed element"
    );
    assert!(Op::Set.idempotent() && Op::Unset.idempotent() && Op::AddToSet.idempotent());
    assert!(!Op::Inc.idempotent() && !Op::Push.idempotent() && !Op::Pull.idempotent());
}

fn operators_on_missing_fields(cx: &Ctx) {
    let c = cx.coll("missing", &[]);
    cx.store.insert(&c, "x", &doc(json!({"keep": 1}))).unwrap();
    let ch = changes(json!({
        "$inc": {"n": 5, "f": 1.5},
        "$push": {"p": "a"},
        "$addToSet": {"s": "b"},
        "$pull": {"q": "c"},
        "$unset": {"u": ""},
    }));
    let got = cx.store.update(&c, "x", &ch).unwrap().unwrap();
    assert_eq!(
        Value::Object(got),
        json!({"keep": 1, "n": 5, "f": 1.5, "p": ["a"], "s": ["b"]})
    );
    // $each appends several elements; $addToSet keeps them unique.
    let got = cx
        .store
        .update(&c, "x", &changes(json!({"$push": {"p": {"$each": ["a", "b"]}}, "$addToSet": {"s": {"$each": ["b", "c", "c"]}}})))
        .unwrap()
        .unwrap();
    assert_eq!(got["p"], json!(["a", "a", "b"]));
    assert_eq!(got["s"], json!(["b", "c"]));
    // Integer increments stay integers, negative ones too; mixing in a float gives a float.
    let got = cx
        .store
        .update(&c, "x", &changes(json!({"$inc": {"n": -7}})))
        .unwrap()
        .unwrap();
    assert_eq!(got["n"], json!(-2));
    let got = cx
        .store
        .update(&c, "x", &changes(json!({"$inc": {"n": 0.5}})))
        .unwrap()
        .unwrap();
    assert_eq!(got["n"], json!(-1.5));
}

fn type_errors_change_nothing(cx: &Ctx) {
    let c = cx.coll("typeerr", &[]);
    let before = json!({"s": "text", "n": 1, "o": {"k": 1}, "a": [1], "z": null});
    cx.store.insert(&c, "x", &doc(before.clone())).unwrap();
    let bad = [
        json!({"$inc": {"s": 1}}),
        json!({"$inc": {"z": 1}}),
        json!({"$inc": {"n": "1"}}),
        json!({"$push": {"n": 1}}),
        json!({"$addToSet": {"o": 1}}),
        json!({"$pull": {"s": "t"}}),
        json!({"$set": {"n.deeper": 1}}),
        json!({"$push": {"a": {"$each": 3}}}),
        // The first change applies, the second fails: nothing is stored.
        json!([{"$set": {"n": 2}}, {"$inc": {"s": 1}}]),
        json!({"$inc": {"n": i64::MAX}}),
    ];
    for change in bad {
        let r = Changes::from_json(&change)
            .map_err(StoreError::from)
            .and_then(|ch| cx.store.update(&c, "x", &ch));
        assert!(is_invalid(r.clone()), "{change}: {r:?}");
        assert_eq!(
            cx.store.get(&c, "x").unwrap().map(Value::Object),
            Some(before.clone()),
            "{change} changed the document"
        );
    }
    // Malformed change documents.
    for change in [
        json!({"$rename": {"a": "b"}}),
        json!({"$set": 1}),
        json!({"$set": {"": 1}}),
        json!({"$set": {"a..b": 1}}),
        json!({"$set": {"a": 1}, "$inc": {"a.b": 1}}),
        json!(3),
    ] {
        assert!(
            is_invalid(Changes::from_json(&change).map_err(StoreError::from)),
            "{change}"
        );
    }
}

fn dotted_paths(cx: &Ctx) {
    let c = cx.coll("dotted", &[]);
    cx.store
        .insert(&c, "x", &doc(json!({"a": {"b": 1, "keep": true}})))
        .unwrap();
    let got = cx
        .store
        .update(
            &c,
            "x",
            &changes(json!({
                "$inc": {"a.b": 2},
                "$set": {"new.deep.field": "v"},
                "$push": {"a.list": 1},
                "$unset": {"missing.path": ""},
            })),
        )
        .unwrap()
        .unwrap();
    assert_eq!(
        Value::Object(got),
        json!({"a": {"b": 3, "keep": true, "list": [1]}, "new": {"deep": {"field": "v"}}})
    );
    let got = cx
        .store
        .update(
            &c,
            "x",
            &changes(json!({"$unset": {"a.keep": ""}, "$pull": {"a.list": 1}})),
        )
        .unwrap()
        .unwrap();
    assert_eq!(
        Value::Object(got),
        json!({"a": {"b": 3, "list": []}, "new": {"deep": {"field": "v"}}})
    );
}

fn idempotent_equivalent_through_the_store(cx: &Ctx) {
    let c = cx.coll("idemeq", &[]);
    let before = doc(json!({"n": 1, "tags": ["a"], "pending": ["Bob"], "o": {"x": 1}}));
    // 000 Example 3.2.1 plus non-idempotent operators.
    let ch = changes(json!([
        {"$addToSet": {"pending": "Carol"}},
        {"$pull": {"pending": "Bob"}, "$addToSet": {"friends": "Bob"}},
        {"$inc": {"n": 2, "o.y": 1}, "$push": {"tags": "a"}},
        {"$set": {"p.q": 1}},
        {"$unset": {"p.q": ""}},
    ]));
    assert!(!ch.is_idempotent());
    let eq = ch.idempotent_equivalent(&before).unwrap();
    assert!(eq.is_idempotent());
    let mut expected = before.clone();
    ch.apply(&mut expected).unwrap();
    cx.store.insert(&c, "x", &before).unwrap();
    let once = cx.store.update(&c, "x", &eq).unwrap().unwrap();
    assert_eq!(once, expected);
    let twice = cx.store.update(&c, "x", &eq).unwrap().unwrap();
    assert_eq!(twice, expected, "the equivalent applied twice");
    assert_eq!(cx.store.get(&c, "x").unwrap().unwrap(), expected);
}

/// A small deterministic generator (no dependency needed).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

fn random_change(rng: &mut Rng) -> Change {
    let op = *rng.pick(&Op::ALL);
    let field = *rng.pick(&["a", "b", "a.x", "a.y", "c.d"]);
    let value = match op {
        Op::Inc => json!(rng.below(7) as i64 - 3),
        Op::Set => rng
            .pick(&[
                json!(1),
                json!("s"),
                json!([1, 2]),
                json!({"x": 5}),
                json!(null),
            ])
            .clone(),
        _ => json!(rng.below(3)),
    };
    Change::new(op, field, value)
}

/// Random changes applied by the store give what `Changes::apply` gives, errors included.
fn random_updates_match_apply(cx: &Ctx) {
    let c = cx.coll("random", &[]);
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut model = doc(json!({}));
    cx.store.insert(&c, "x", &model).unwrap();
    for _ in 0..60 {
        let ch: Changes = (0..1 + rng.below(3))
            .map(|_| random_change(&mut rng))
            .collect();
        let mut next = model.clone();
        let want = ch.apply(&mut next);
        let got = cx.store.update(&c, "x", &ch);
        match want {
            Ok(()) => {
                assert_eq!(got.unwrap().unwrap(), next, "{}", ch.to_json());
                model = next;
            }
            Err(e) => assert_eq!(got.unwrap_err(), e.into()),
        }
    }
    assert_eq!(cx.store.get(&c, "x").unwrap().unwrap(), model);
}

fn update_of_missing_document(cx: &Ctx) {
    let c = cx.coll("updmissing", &[]);
    assert_eq!(
        cx.store
            .update(&c, "nobody", &changes(json!({"$inc": {"n": 1}})))
            .unwrap(),
        None
    );
    assert_eq!(cx.store.get(&c, "nobody").unwrap(), None);
    assert_eq!(cx.store.count(&c).unwrap(), 0);
}

// ---------------------------------------------------------------------------------------------
// Documents
// ---------------------------------------------------------------------------------------------

fn crud(cx: &Ctx) {
    let c = cx.coll("crud", &[]);
    let d1 = doc(json!({"name": "Alice", "n": 1}));
    let d2 = doc(json!({"name": "Bob"}));
    assert_eq!(cx.store.get(&c, "a").unwrap(), None);
    cx.store.insert(&c, "a", &d1).unwrap();
    assert_eq!(cx.store.get(&c, "a").unwrap(), Some(d1.clone()));
    assert!(matches!(
        cx.store.insert(&c, "a", &d2),
        Err(StoreError::Constraint(_))
    ));
    assert_eq!(cx.store.get(&c, "a").unwrap(), Some(d1.clone()));
    cx.store.put(&c, "a", &d2).unwrap();
    assert_eq!(cx.store.get(&c, "a").unwrap(), Some(d2.clone()));
    cx.store.put(&c, "b", &d1).unwrap();
    assert_eq!(cx.store.count(&c).unwrap(), 2);
    assert!(cx.store.delete(&c, "a").unwrap());
    assert!(!cx.store.delete(&c, "a").unwrap());
    assert_eq!(cx.store.get(&c, "a").unwrap(), None);
    assert_eq!(cx.store.count(&c).unwrap(), 1);
    // Ids: non-empty, at most 512 bytes.
    assert!(is_invalid(cx.store.insert(&c, "", &d1)));
    assert!(is_invalid(cx.store.get(&c, &"x".repeat(513))));
    let long = "é".repeat(256);
    cx.store.insert(&c, &long, &d1).unwrap();
    assert_eq!(cx.store.get(&c, &long).unwrap(), Some(d1));
}

fn documents_round_trip_exactly(cx: &Ctx) {
    let c = cx.coll("roundtrip", &[]);
    let d = doc(json!({
        "unicode": "héllo wörld ✓ 日本語 🦀",
        "quotes": "it's \"quoted\" \\ back\nslash\ttab\u{0}nul",
        "big": i64::MAX,
        "small": i64::MIN,
        "huge": u64::MAX,
        "float": 0.1,
        "tiny": 1e-300,
        "neg": -2.5e100,
        "whole_float": 3.0,
        "nested": {"array": [1, "two", null, true, {"x": []}], "empty": {}},
        "null": null,
        "bool": false,
    }));
    for id in [
        "plain",
        "with space",
        "ünïcödé",
        "'; DROP TABLE x; --",
        "a\"b`c",
    ] {
        cx.store.insert(&c, id, &d).unwrap();
        assert_eq!(cx.store.get(&c, id).unwrap().as_ref(), Some(&d), "{id}");
    }
    let got = cx.store.get(&c, "plain").unwrap().unwrap();
    assert!(got["whole_float"].is_f64() && got["big"].is_i64() && got["huge"].is_u64());
}

/// Several document writes in one transaction: a failing one (or a failing fence) undoes those
/// before it.
fn write_batch_is_all_or_nothing(cx: &Ctx) {
    use cads_store::{DocOp, DocWrite};
    let c = cx.coll("batch", &[]);
    cx.store.insert(&c, "a", &doc(json!({"n": 1}))).unwrap();
    cx.store.insert(&c, "b", &doc(json!({"n": 1}))).unwrap();
    let write = |id: &str, op: DocOp| DocWrite {
        collection: c.clone(),
        id: id.into(),
        op,
    };
    let failing = [
        write("a", DocOp::Update(changes(json!({"$inc": {"n": 10}})))),
        write("c", DocOp::Put(doc(json!({"n": 3})))),
        write("b", DocOp::Insert(doc(json!({"n": 9})))),
    ];
    let r = cx.store.write_batch(&failing);
    assert!(matches!(r, Err(StoreError::Constraint(_))), "{r:?}");
    assert_eq!(
        cx.store.get(&c, "a").unwrap().unwrap()["n"],
        json!(1),
        "rolled back"
    );
    assert!(cx.store.get(&c, "c").unwrap().is_none());
    cx.store
        .write_batch(&[
            write("a", DocOp::Update(changes(json!({"$inc": {"n": 10}})))),
            write("b", DocOp::Delete),
            write("c", DocOp::Insert(doc(json!({"n": 3})))),
            write("missing", DocOp::Update(changes(json!({"$set": {"x": 1}})))),
        ])
        .unwrap();
    assert_eq!(cx.store.get(&c, "a").unwrap().unwrap()["n"], json!(11));
    assert!(cx.store.get(&c, "b").unwrap().is_none());
    assert_eq!(cx.store.get(&c, "c").unwrap().unwrap()["n"], json!(3));
    assert!(cx.store.get(&c, "missing").unwrap().is_none());
    cx.store.write_batch(&[]).unwrap();

    // The fence runs after the writes, before the commit; its error undoes them.
    let set = |n: i64| [write("a", DocOp::Put(doc(json!({"n": n}))))];
    let mut fenced = 0;
    let r = cx.store.write_batch_fenced(&set(20), &mut || {
        fenced += 1;
        Err(StoreError::Conflict("the fence says no".into()))
    });
    assert!(matches!(r, Err(StoreError::Conflict(_))), "{r:?}");
    assert_eq!(fenced, 1);
    assert_eq!(cx.store.get(&c, "a").unwrap().unwrap()["n"], json!(11));
    cx.store
        .write_batch_fenced(&set(21), &mut || Ok(()))
        .unwrap();
    assert_eq!(cx.store.get(&c, "a").unwrap().unwrap()["n"], json!(21));
    let r = cx.store.write_batch_fenced(&[], &mut || {
        Err(StoreError::Conflict("an empty batch is fenced too".into()))
    });
    assert!(r.is_err());
}

/// A batch of puts, deletes and updates (which the SQL stores fold into a few statements per
/// collection) leaves the documents and the indexed column as applying its writes one at a time
/// does: several writes to one document in order, updates of documents that are missing or that
/// an earlier write of the batch deleted or created.
fn write_batch_matches_one_write_at_a_time(cx: &Ctx) {
    use cads_store::{DocOp, DocWrite};
    let batched = cx.coll("foldbatch", &[IndexedField::int("n")]);
    let single = cx.coll("foldsingle", &[IndexedField::int("n")]);
    let ids = ["d0", "d1", "d2", "d3", "d4", "d5"];
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    for round in 0..12 {
        for c in [&batched, &single] {
            for id in &ids[..4] {
                cx.store
                    .put(c, id, &doc(json!({"n": 1, "log": [round]})))
                    .unwrap();
            }
        }
        let mut ops = Vec::new();
        for _ in 0..1 + rng.below(12) {
            let id = *rng.pick(&ids);
            let op = match rng.below(4) {
                0 => DocOp::Put(doc(json!({"n": rng.below(5), "log": []}))),
                1 => DocOp::Delete,
                _ => DocOp::Update(changes(
                    json!({"$inc": {"n": rng.below(3)}, "$push": {"log": rng.below(9)}}),
                )),
            };
            ops.push((id, op));
        }
        let writes: Vec<DocWrite> = ops
            .iter()
            .map(|(id, op)| DocWrite {
                collection: batched.clone(),
                id: id.to_string(),
                op: op.clone(),
            })
            .collect();
        cx.store.write_batch(&writes).unwrap();
        for (id, op) in &ops {
            match op {
                DocOp::Put(d) => cx.store.put(&single, id, d).unwrap(),
                DocOp::Delete => {
                    cx.store.delete(&single, id).unwrap();
                }
                DocOp::Update(ch) => {
                    cx.store.update(&single, id, ch).unwrap();
                }
                DocOp::Insert(_) => unreachable!(),
            }
        }
        let all = |c: &str| cx.store.scan(c, None, Unbounded, Unbounded, 100).unwrap();
        assert_eq!(all(&batched), all(&single), "round {round}: {ops:?}");
        let by_n = |c: &str| {
            ids_of(
                &cx.store
                    .scan(c, Some("n"), Unbounded, Unbounded, 100)
                    .unwrap(),
            )
        };
        assert_eq!(by_n(&batched), by_n(&single), "round {round}: the index");
    }
}

fn ids_of(rows: &[(String, Document)]) -> Vec<String> {
    rows.iter().map(|(id, _)| id.clone()).collect()
}

fn get_many_in_order(cx: &Ctx) {
    let c = cx.coll("getmany", &[]);
    for i in 0..10 {
        cx.store
            .insert(&c, &format!("k{i}"), &doc(json!({"i": i})))
            .unwrap();
    }
    let got = cx
        .store
        .get_many(&c, &["k3", "nope", "k0", "k3", "k9"])
        .unwrap();
    let got: Vec<Option<i64>> = got
        .iter()
        .map(|d| d.as_ref().map(|d| d["i"].as_i64().unwrap()))
        .collect();
    assert_eq!(got, vec![Some(3), None, Some(0), Some(3), Some(9)]);
    assert!(cx.store.get_many(&c, &[]).unwrap().is_empty());
    // More ids than one statement takes.
    let ids: Vec<String> = (0..1200).map(|i| format!("k{}", i % 12)).collect();
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let got = cx.store.get_many(&c, &refs).unwrap();
    assert_eq!(got.len(), 1200);
    assert_eq!(got.iter().filter(|d| d.is_some()).count(), 1000);
}

/// `get_text` and `get_many_text` return the documents `get` and `get_many` return, as text, in
/// the order asked.
fn documents_read_as_text(cx: &Ctx) {
    let c = cx.coll("texts", &[]);
    let alice = doc(json!({"name": "Al \"ice\" é", "n": 1.5, "tags": [1, {"x": null}]}));
    cx.store.insert(&c, "alice", &alice).unwrap();
    cx.store.insert(&c, "bob", &doc(json!({}))).unwrap();
    let text = cx.store.get_text(&c, "alice").unwrap().unwrap();
    assert_eq!(text.to_document().unwrap(), alice);
    assert_eq!(cx.store.get_text(&c, "nope").unwrap(), None);
    let texts = cx
        .store
        .get_many_text(&c, &["bob", "nope", "alice"])
        .unwrap();
    let docs: Vec<Option<Document>> = texts
        .iter()
        .map(|t| t.as_ref().map(|t| t.to_document().unwrap()))
        .collect();
    assert_eq!(
        docs,
        cx.store.get_many(&c, &["bob", "nope", "alice"]).unwrap()
    );
    assert!(
        cx.store.get_text(&c, "bad\u{1}id").is_err(),
        "ids are checked"
    );
}

fn insert_many_bulk(cx: &Ctx) {
    let c = cx.coll("bulk", &[IndexedField::int("n")]);
    let docs: Vec<(String, Document)> = (0..3000)
        .map(|i| {
            (
                format!("user{i:05}"),
                doc(json!({"n": i, "pad": "x".repeat(50)})),
            )
        })
        .collect();
    let start = Instant::now();
    cx.store.insert_many(&c, &docs).unwrap();
    let took = start.elapsed();
    assert_eq!(cx.store.count(&c).unwrap(), 3000);
    assert_eq!(
        cx.store.get(&c, "user02999").unwrap().unwrap()["n"],
        json!(2999)
    );
    // One existing id (or a duplicate) fails the whole batch.
    let more = vec![
        ("new1".to_owned(), doc(json!({}))),
        ("user00001".to_owned(), doc(json!({}))),
    ];
    assert!(matches!(
        cx.store.insert_many(&c, &more),
        Err(StoreError::Constraint(_))
    ));
    let dup = vec![
        ("new2".to_owned(), doc(json!({}))),
        ("new2".to_owned(), doc(json!({}))),
    ];
    assert!(matches!(
        cx.store.insert_many(&c, &dup),
        Err(StoreError::Constraint(_))
    ));
    assert_eq!(cx.store.get(&c, "new1").unwrap(), None);
    assert_eq!(cx.store.get(&c, "new2").unwrap(), None);
    assert_eq!(cx.store.count(&c).unwrap(), 3000);
    cx.store.insert_many(&c, &[]).unwrap();
    eprintln!("{:?}: insert_many of 3000 documents took {took:?}", cx.kind);
}

fn ids(rows: &[(String, Document)]) -> Vec<&str> {
    rows.iter().map(|(id, _)| id.as_str()).collect()
}

fn scan_by_id(cx: &Ctx) {
    let c = cx.coll("scanid", &[]);
    // Byte order of UTF-8: "B" < "a" < "a b" < "ab" < "b" < "é".
    for id in ["b", "a", "é", "B", "ab", "a b"] {
        cx.store.insert(&c, id, &doc(json!({"id": id}))).unwrap();
    }
    let all = cx.store.scan(&c, None, Unbounded, Unbounded, 100).unwrap();
    assert_eq!(ids(&all), ["B", "a", "a b", "ab", "b", "é"]);
    assert_eq!(all[2].1["id"], json!("a b"));
    let a = json!("a");
    let b = json!("b");
    let got = cx
        .store
        .scan(&c, None, Included(&a), Included(&b), 100)
        .unwrap();
    assert_eq!(ids(&got), ["a", "a b", "ab", "b"]);
    let got = cx
        .store
        .scan(&c, None, Excluded(&a), Excluded(&b), 100)
        .unwrap();
    assert_eq!(ids(&got), ["a b", "ab"]);
    let got = cx.store.scan(&c, None, Included(&a), Unbounded, 2).unwrap();
    assert_eq!(ids(&got), ["a", "a b"]);
    assert!(cx
        .store
        .scan(&c, None, Unbounded, Unbounded, 0)
        .unwrap()
        .is_empty());
    assert!(cx
        .store
        .scan(&c, None, Included(&b), Excluded(&a), 10)
        .unwrap()
        .is_empty());
    assert!(is_invalid(cx.store.scan(
        &c,
        None,
        Included(&json!(1)),
        Unbounded,
        10
    )));
}

fn scan_by_indexed_field(cx: &Ctx) {
    let c = cx.coll(
        "scanfield",
        &[IndexedField::int("age"), IndexedField::text("profile.city")],
    );
    let people = [
        ("p1", json!({"age": 30, "profile": {"city": "Oslo"}})),
        ("p2", json!({"age": -5, "profile": {"city": "Bergen"}})),
        ("p3", json!({"age": 30, "profile": {"city": "Åsane"}})),
        ("p0", json!({"age": 30})),
        ("p4", json!({"age": i64::MAX, "profile": {}})),
        ("p5", json!({"name": "no age", "profile": {"city": "Oslo"}})),
        ("p6", json!({"age": null, "profile": {"city": null}})),
    ];
    for (id, d) in &people {
        cx.store.insert(&c, id, &doc(d.clone())).unwrap();
    }
    let all = cx
        .store
        .scan(&c, Some("age"), Unbounded, Unbounded, 100)
        .unwrap();
    assert_eq!(
        ids(&all),
        ["p2", "p0", "p1", "p3", "p4"],
        "by age then id; no age: left out"
    );
    let (lo, hi) = (json!(0), json!(30));
    assert_eq!(
        ids(&cx
            .store
            .scan(&c, Some("age"), Included(&lo), Included(&hi), 100)
            .unwrap()),
        ["p0", "p1", "p3"]
    );
    assert_eq!(
        ids(&cx
            .store
            .scan(&c, Some("age"), Excluded(&hi), Unbounded, 100)
            .unwrap()),
        ["p4"]
    );
    assert_eq!(
        ids(&cx
            .store
            .scan(&c, Some("age"), Unbounded, Excluded(&hi), 100)
            .unwrap()),
        ["p2"]
    );
    assert_eq!(
        ids(&cx
            .store
            .scan(&c, Some("age"), Included(&hi), Unbounded, 2)
            .unwrap()),
        ["p0", "p1"]
    );
    let cities = cx
        .store
        .scan(&c, Some("profile.city"), Unbounded, Unbounded, 100)
        .unwrap();
    assert_eq!(
        ids(&cities),
        ["p2", "p1", "p5", "p3"],
        "byte order: Bergen < Oslo < Åsane"
    );
    let oslo = json!("Oslo");
    assert_eq!(
        ids(&cx
            .store
            .scan(
                &c,
                Some("profile.city"),
                Included(&oslo),
                Included(&oslo),
                100
            )
            .unwrap()),
        ["p1", "p5"]
    );
    // Updates and puts move documents in the index.
    cx.store
        .update(&c, "p2", &changes(json!({"$inc": {"age": 100}})))
        .unwrap();
    cx.store.put(&c, "p0", &doc(json!({"age": -1}))).unwrap();
    let all = cx
        .store
        .scan(&c, Some("age"), Unbounded, Unbounded, 100)
        .unwrap();
    assert_eq!(ids(&all), ["p0", "p1", "p3", "p2", "p4"]);
    cx.store.delete(&c, "p1").unwrap();
    assert_eq!(
        ids(&cx
            .store
            .scan(&c, Some("age"), Included(&hi), Included(&hi), 100)
            .unwrap()),
        ["p3"]
    );
    // Bounds of the wrong kind, fields not indexed.
    assert!(is_invalid(cx.store.scan(
        &c,
        Some("age"),
        Included(&json!("30")),
        Unbounded,
        10
    )));
    assert!(is_invalid(cx.store.scan(
        &c,
        Some("age"),
        Included(&json!(1.5)),
        Unbounded,
        10
    )));
    assert!(is_invalid(cx.store.scan(
        &c,
        Some("profile.city"),
        Included(&json!(3)),
        Unbounded,
        10
    )));
    assert!(is_invalid(cx.store.scan(
        &c,
        Some("name"),
        Unbounded,
        Unbounded,
        10
    )));
}

fn indexed_field_kinds_are_checked(cx: &Ctx) {
    let c = cx.coll("kinds", &[IndexedField::int("n"), IndexedField::text("t")]);
    assert!(is_invalid(cx.store.insert(
        &c,
        "a",
        &doc(json!({"n": "one"}))
    )));
    assert!(is_invalid(cx.store.insert(
        &c,
        "a",
        &doc(json!({"n": 1.5}))
    )));
    assert!(is_invalid(cx.store.put(&c, "a", &doc(json!({"t": 5})))));
    assert!(is_invalid(cx.store.insert(
        &c,
        "a",
        &doc(json!({"t": "x".repeat(513)}))
    )));
    assert!(is_invalid(
        cx.store
            .insert_many(&c, &[("a".into(), doc(json!({"n": [1]})))])
    ));
    assert_eq!(cx.store.count(&c).unwrap(), 0);
    cx.store
        .insert(&c, "a", &doc(json!({"n": 1, "t": "x".repeat(512)})))
        .unwrap();
    assert!(is_invalid(cx.store.update(
        &c,
        "a",
        &changes(json!({"$set": {"n": "two"}}))
    )));
    assert_eq!(cx.store.get(&c, "a").unwrap().unwrap()["n"], json!(1));
}

fn collections(cx: &Ctx) {
    let fields = [IndexedField::int("a"), IndexedField::text("b")];
    let c = cx.coll("colls", &fields);
    // Idempotent, in any order of fields; from another store too (the catalog is in the database).
    cx.store
        .create_collection(&c, &[fields[1].clone(), fields[0].clone()])
        .unwrap();
    let other = cx.open_with(StoreOptions::default().with_pool_size(2));
    other.create_collection(&c, &fields).unwrap();
    assert!(is_invalid(
        other.create_collection(&c, &[IndexedField::int("a")])
    ));
    assert!(is_invalid(cx.store.create_collection(
        &c,
        &[IndexedField::text("a"), IndexedField::text("b")]
    )));
    cx.store.insert(&c, "x", &doc(json!({"a": 1}))).unwrap();
    assert_eq!(
        other
            .scan(&c, Some("a"), Unbounded, Unbounded, 10)
            .unwrap()
            .len(),
        1
    );
    // Names become table names: only [a-z0-9_], not too long, not the catalog.
    for bad in [
        "",
        "Users",
        "a-b",
        "a b",
        "x;drop",
        "cads_collections",
        &"x".repeat(49),
    ] {
        assert!(is_invalid(cx.store.create_collection(bad, &[])), "{bad:?}");
    }
    assert!(is_invalid(cx.store.create_collection(
        &unique("badfield"),
        &[IndexedField::int("a-b")]
    )));
    assert!(is_invalid(cx.store.create_collection(
        &unique("dupfield"),
        &[IndexedField::int("a"), IndexedField::text("A")]
    )));
    // A collection that does not exist.
    let missing = unique("missing");
    assert!(is_invalid(cx.store.get(&missing, "x")));
    assert!(is_invalid(cx.store.insert(&missing, "x", &doc(json!({})))));
    // Dropping: gone for every store, idempotent; creating again starts empty.
    cx.store.drop_collection(&c).unwrap();
    cx.store.drop_collection(&c).unwrap();
    assert!(is_invalid(cx.store.get(&c, "x")));
    cx.store.create_collection(&c, &[]).unwrap();
    assert_eq!(cx.store.count(&c).unwrap(), 0);
}

/// The framework's own tables (`cads_` names) cannot be created or dropped as collections.
fn reserved_names_are_refused(cx: &Ctx) {
    cx.store
        .execute_batch(
            "CREATE TABLE IF NOT EXISTS cads_applied_sessions (id VARCHAR(64) PRIMARY KEY)",
        )
        .unwrap();
    for name in ["cads_applied_sessions", "cads_collections", "cads_anything"] {
        assert!(is_invalid(cx.store.drop_collection(name)), "{name}");
        assert!(is_invalid(cx.store.create_collection(name, &[])), "{name}");
    }
    // Still there.
    let mut tx = cx.store.begin(Isolation::ReadCommitted).unwrap();
    tx.query("SELECT COUNT(*) FROM cads_applied_sessions", &[])
        .unwrap();
    tx.commit().unwrap();
}

/// A catalog row written behind the store's back, naming an indexed field that is not a field
/// name, is refused when the collection is loaded: its text never reaches a SQL statement.
fn crafted_catalog_rows_are_refused(cx: &Ctx) {
    let c = cx.coll("crafted", &[IndexedField::int("a")]);
    let victim = cx.table("victim");
    cx.store
        .execute_batch(&format!("CREATE TABLE {victim} (x INTEGER)"))
        .unwrap();
    let crafted =
        json!([{"name": format!("a\" INTEGER); DROP TABLE {victim}; --"), "kind": "int"}]);
    let mut tx = cx.store.begin(Isolation::ReadCommitted).unwrap();
    tx.execute(
        "UPDATE cads_collections SET indexed = ? WHERE name = ?",
        &[
            SqlValue::Text(crafted.to_string()),
            SqlValue::Text(c.clone()),
        ],
    )
    .unwrap();
    tx.commit().unwrap();
    // A store that has not loaded the collection yet reads the crafted row.
    let fresh = cx.open_with(StoreOptions::default().with_pool_size(2));
    for r in [
        fresh.get(&c, "x").map(drop),
        fresh.insert(&c, "x", &doc(json!({"a": 1}))),
    ] {
        assert!(
            matches!(r, Err(StoreError::Backend(ref m)) if m.contains("bad catalog entry")),
            "{r:?}"
        );
    }
    assert!(is_invalid(
        fresh.create_collection(&c, &[IndexedField::int("a")])
    ));
    let mut tx = cx.store.begin(Isolation::ReadCommitted).unwrap();
    tx.query(&format!("SELECT COUNT(*) FROM {victim}"), &[])
        .expect("the victim table is still there");
    tx.commit().unwrap();
}

/// Ids with control characters (a line break would split write-back's lists) are refused.
fn ids_without_control_characters(cx: &Ctx) {
    let c = cx.coll("ctrl_ids", &[]);
    for id in ["a\nb", "a\rb", "\0", "tab\there", "\u{7f}"] {
        assert!(
            is_invalid(cx.store.insert(&c, id, &doc(json!({})))),
            "{id:?}"
        );
        assert!(is_invalid(cx.store.get(&c, id)), "{id:?}");
    }
    assert_eq!(cx.store.count(&c).unwrap(), 0);
}

fn is_limit<T: std::fmt::Debug>(r: Result<T, StoreError>) -> bool {
    matches!(r, Err(StoreError::Limit(_)))
}

/// Documents past the bounds of depth and size are refused, on every kind of write, and change
/// nothing.
fn document_limits_change_nothing(cx: &Ctx) {
    use cads_store::limits::{MAX_DEPTH, MAX_DOCUMENT_BYTES};
    use cads_store::{DocOp, DocWrite};
    let c = cx.coll("limits", &[]);
    let mut deep = json!(1);
    for _ in 0..=MAX_DEPTH {
        deep = json!({ "d": deep });
    }
    let deep = doc(deep);
    let big = doc(json!({ "s": "x".repeat(MAX_DOCUMENT_BYTES) }));
    for d in [&deep, &big] {
        assert!(is_limit(cx.store.insert(&c, "a", d)));
        assert!(is_limit(cx.store.put(&c, "a", d)));
        assert!(is_limit(
            cx.store.insert_many(&c, &[("a".into(), d.clone())])
        ));
    }
    assert_eq!(cx.store.count(&c).unwrap(), 0);
    // An update that would grow a document past the size bound leaves it as it was.
    let half = "y".repeat(MAX_DOCUMENT_BYTES / 2 + 1);
    cx.store.insert(&c, "a", &doc(json!({"p": half}))).unwrap();
    let before = cx.store.get(&c, "a").unwrap();
    assert!(is_limit(cx.store.update(
        &c,
        "a",
        &Changes::new().set("q", half.clone())
    )));
    let batch = [
        DocWrite {
            collection: c.clone(),
            id: "b".into(),
            op: DocOp::Put(doc(json!({"ok": true}))),
        },
        DocWrite {
            collection: c.clone(),
            id: "a".into(),
            op: DocOp::Update(Changes::new().push("r", half.clone())),
        },
    ];
    assert!(is_limit(cx.store.write_batch(&batch)));
    assert_eq!(cx.store.get(&c, "a").unwrap(), before);
    assert_eq!(cx.store.get(&c, "b").unwrap(), None);
    // A change too deep for the document, built in code, is refused too.
    let mut operand = json!(1);
    for _ in 0..MAX_DEPTH {
        operand = json!([operand]);
    }
    assert!(is_limit(cx.store.update(
        &c,
        "a",
        &Changes::new().set("p", operand)
    )));
    assert_eq!(cx.store.get(&c, "a").unwrap(), before);
}

fn concurrent_inc_is_atomic(cx: &Ctx) {
    let c = cx.coll("conc_inc", &[]);
    cx.store
        .insert(&c, "counter", &doc(json!({"n": 0})))
        .unwrap();
    let inc = changes(json!({"$inc": {"n": 1}}));
    thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                for _ in 0..200 {
                    cx.store.update(&c, "counter", &inc).unwrap().unwrap();
                }
            });
        }
        // Readers meanwhile see whole documents.
        s.spawn(|| {
            for _ in 0..50 {
                let d = cx.store.get(&c, "counter").unwrap().unwrap();
                assert!(d["n"].as_i64().unwrap() <= 1600);
            }
        });
    });
    assert_eq!(
        cx.store.get(&c, "counter").unwrap().unwrap()["n"],
        json!(1600)
    );
}

fn concurrent_push_keeps_every_element(cx: &Ctx) {
    let c = cx.coll("conc_push", &[]);
    cx.store.insert(&c, "list", &doc(json!({}))).unwrap();
    thread::scope(|s| {
        for t in 0..8 {
            let c = &c;
            s.spawn(move || {
                for i in 0..40 {
                    let ch = changes(
                        json!({"$push": {"items": format!("{t}-{i}")}, "$inc": {"len": 1}}),
                    );
                    cx.store.update(c, "list", &ch).unwrap().unwrap();
                }
            });
        }
    });
    let d = cx.store.get(&c, "list").unwrap().unwrap();
    let mut items: Vec<&str> = d["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(items.len(), 320);
    assert_eq!(d["len"], json!(320));
    items.sort();
    items.dedup();
    assert_eq!(items.len(), 320);
}

/// 32 threads mixing reads, writes, scans and SQL transactions: no error at all (SQLite's "database
/// is locked" must never reach the caller), and the counts add up.
fn many_threads_mixed(cx: &Ctx) {
    let c = cx.coll("mixed", &[IndexedField::int("n")]);
    let t = cx.table("mixed_sql");
    cx.store
        .execute_batch(&format!(
            "CREATE TABLE {t} (id BIGINT PRIMARY KEY, v BIGINT NOT NULL){}; INSERT INTO {t} VALUES (1, 0)",
            cx.engine_suffix()
        ))
        .unwrap();
    cx.store
        .insert(&c, "shared", &doc(json!({"n": 0})))
        .unwrap();
    let (threads, rounds) = (32, 12);
    thread::scope(|s| {
        for th in 0..threads {
            let (c, t) = (&c, &t);
            s.spawn(move || {
                let mine = format!("t{th}");
                cx.store.put(c, &mine, &doc(json!({"n": th}))).unwrap();
                for i in 0..rounds {
                    match (th + i) % 4 {
                        0 => {
                            cx.store
                                .update(c, "shared", &changes(json!({"$inc": {"n": 1}})))
                                .unwrap();
                        }
                        1 => {
                            let mut tx = cx.store.begin(Isolation::ReadCommitted).unwrap();
                            tx.execute(
                                &format!("UPDATE {t} SET v = v + 1 WHERE id = ?"),
                                &[1.into()],
                            )
                            .unwrap();
                            tx.commit().unwrap();
                        }
                        2 => {
                            cx.store
                                .update(c, &mine, &changes(json!({"$push": {"log": i}})))
                                .unwrap();
                            assert!(cx.store.get(c, &mine).unwrap().is_some());
                        }
                        _ => {
                            cx.store
                                .scan(c, Some("n"), Unbounded, Unbounded, 10)
                                .unwrap();
                            cx.store.get_many(c, &["shared", &mine]).unwrap();
                        }
                    }
                }
            });
        }
    });
    let per_kind = threads * rounds / 4;
    assert_eq!(
        cx.store.get(&c, "shared").unwrap().unwrap()["n"],
        json!(per_kind)
    );
    let mut tx = cx.store.begin(Isolation::ReadCommitted).unwrap();
    let v = tx
        .query(&format!("SELECT v FROM {t} WHERE id = 1"), &[])
        .unwrap()[0]
        .get::<i64>(0)
        .unwrap();
    assert_eq!(v, per_kind as i64);
    tx.commit().unwrap();
    assert_eq!(cx.store.count(&c).unwrap(), threads as u64 + 1);
}

// ---------------------------------------------------------------------------------------------
// SQL
// ---------------------------------------------------------------------------------------------

/// A read-only transaction reads while a writer holds its transaction open (on SQLite too, whose
/// writers take turns), sees only committed data, and refuses writes.
fn sql_read_transactions_run_beside_a_writer(cx: &Ctx) {
    let t = cx.table("readtx");
    cx.store
        .execute_batch(&format!(
            "CREATE TABLE {t} (id BIGINT PRIMARY KEY, v BIGINT){}; INSERT INTO {t} VALUES (1, 10)",
            cx.engine_suffix()
        ))
        .unwrap();
    let mut writer = cx.store.begin(Isolation::ReadCommitted).unwrap();
    writer
        .execute(&format!("UPDATE {t} SET v = 11 WHERE id = 1"), &[])
        .unwrap();
    // The writer commits only after this read: a reader that waited for it would not return.
    let mut reader = cx.store.begin_read(Isolation::ReadCommitted).unwrap();
    let rows = reader
        .query(&format!("SELECT v FROM {t} WHERE id = 1"), &[])
        .unwrap();
    assert_eq!(
        rows[0].get::<i64>(0).unwrap(),
        10,
        "uncommitted data is not read"
    );
    assert!(is_invalid(reader.execute(&format!("DELETE FROM {t}"), &[])));
    reader.rollback().unwrap();
    writer.commit().unwrap();
    let mut reader = cx.store.begin_read(Isolation::ReadCommitted).unwrap();
    let rows = reader
        .query(&format!("SELECT v FROM {t} WHERE id = 1"), &[])
        .unwrap();
    assert_eq!(rows[0].get::<i64>(0).unwrap(), 11);
    reader.commit().unwrap();
}

fn sql_commit_rollback_drop(cx: &Ctx) {
    let t = cx.table("tx");
    cx.store
        .execute_batch(&format!("CREATE TABLE {t} (id BIGINT PRIMARY KEY, v TEXT){}; INSERT INTO {t} VALUES (0, 'zero')", cx.engine_suffix()))
        .unwrap();
    let count = |store: &dyn DataStore| -> i64 {
        let mut tx = store.begin(Isolation::ReadCommitted).unwrap();
        let rows = tx
            .query(&format!("SELECT COUNT(*) AS n FROM {t}"), &[])
            .unwrap();
        tx.commit().unwrap();
        rows[0].get::<i64>("n").unwrap()
    };
    assert_eq!(count(&*cx.store), 1);
    // Commit: visible to others.
    let mut tx = cx.store.begin(Isolation::ReadCommitted).unwrap();
    assert_eq!(
        tx.execute(
            &format!("INSERT INTO {t} (id, v) VALUES (?, ?)"),
            &[1.into(), "one".into()]
        )
        .unwrap(),
        1
    );
    assert_eq!(
        tx.execute(
            &format!("INSERT INTO {t} (id, v) VALUES (?, ?), (?, ?)"),
            &[2.into(), "two".into(), 3.into(), "three".into()]
        )
        .unwrap(),
        2
    );
    let rows = tx
        .query(&format!("SELECT v FROM {t} WHERE id = ?"), &[2.into()])
        .unwrap();
    assert_eq!(rows[0].get::<String>(0).unwrap(), "two");
    tx.commit().unwrap();
    assert_eq!(count(&*cx.store), 4);
    // Rollback: invisible.
    let mut tx = cx.store.begin(Isolation::RepeatableRead).unwrap();
    tx.execute(
        &format!("INSERT INTO {t} (id, v) VALUES (?, ?)"),
        &[4.into(), "four".into()],
    )
    .unwrap();
    assert_eq!(
        tx.execute(
            &format!("UPDATE {t} SET v = ? WHERE id >= ?"),
            &["x".into(), 1.into()]
        )
        .unwrap(),
        4
    );
    tx.rollback().unwrap();
    assert_eq!(count(&*cx.store), 4);
    // Drop without commit: rolled back.
    {
        let mut tx = cx.store.begin(Isolation::Serializable).unwrap();
        tx.execute(&format!("DELETE FROM {t}"), &[]).unwrap();
    }
    assert_eq!(count(&*cx.store), 4);
    // Updates count rows matched, even when the value does not change.
    let mut tx = cx.store.begin(Isolation::ReadCommitted).unwrap();
    assert_eq!(
        tx.execute(
            &format!("UPDATE {t} SET v = ? WHERE id = ?"),
            &["one".into(), 1.into()]
        )
        .unwrap(),
        1
    );
    assert_eq!(
        tx.execute(
            &format!("UPDATE {t} SET v = ? WHERE id = ?"),
            &["one".into(), 99.into()]
        )
        .unwrap(),
        0
    );
    // Bad SQL and a wrong parameter count are Invalid.
    assert!(is_invalid(tx.query("SELEKT 1", &[])));
    drop(tx);
    let mut tx = cx.store.begin(Isolation::ReadCommitted).unwrap();
    assert!(is_invalid(
        tx.query(&format!("SELECT v FROM {t} WHERE id = ?"), &[])
    ));
    drop(tx);
    let mut tx = cx.store.begin(Isolation::ReadCommitted).unwrap();
    assert!(is_invalid(tx.query(&format!("SELECT nope FROM {t}"), &[])));
    drop(tx);
    // A question mark inside a string literal is not a parameter.
    let mut tx = cx.store.begin(Isolation::ReadCommitted).unwrap();
    let rows = tx
        .query(
            &format!("SELECT v, 'what?' AS q FROM {t} WHERE id = ?"),
            &[3.into()],
        )
        .unwrap();
    assert_eq!(rows[0].get::<String>("q").unwrap(), "what?");
    assert_eq!(rows[0].columns(), ["v", "q"]);
    tx.commit().unwrap();
}

fn sql_parameters_round_trip(cx: &Ctx) {
    let t = cx.table("params");
    let float = if cx.dialect() == Dialect::MySql {
        "DOUBLE"
    } else {
        "DOUBLE PRECISION"
    };
    cx.store
        .execute_batch(&format!(
            "CREATE TABLE {t} (id INTEGER PRIMARY KEY, i BIGINT, f {float}, s TEXT, b {}, d DECIMAL(12, 2)){}",
            cx.bytes_type(),
            cx.engine_suffix()
        ))
        .unwrap();
    let rows: Vec<Vec<SqlValue>> = vec![
        vec![
            1.into(),
            SqlValue::Null,
            SqlValue::Null,
            SqlValue::Null,
            SqlValue::Null,
            SqlValue::Null,
        ],
        vec![
            2.into(),
            i64::MAX.into(),
            0.5.into(),
            "héllo ✓ 日本 🦀".into(),
            vec![0u8, 1, 2, 255].into(),
            SqlValue::Int(42),
        ],
        vec![
            3.into(),
            i64::MIN.into(),
            (-1e300).into(),
            "".into(),
            Vec::<u8>::new().into(),
            SqlValue::Text("-12.34".into()),
        ],
        vec![
            4.into(),
            (-1).into(),
            std::f64::consts::PI.into(),
            "it's \"quoted\" ? \\".into(),
            b"\0nul\0".to_vec().into(),
            SqlValue::Float(0.5),
        ],
        vec![
            5.into(),
            0.into(),
            1e-300.into(),
            "x".repeat(10_000).into(),
            vec![7u8; 100_000].into(),
            SqlValue::Null,
        ],
    ];
    let mut tx = cx.store.begin(Isolation::ReadCommitted).unwrap();
    for row in &rows {
        tx.execute(
            &format!("INSERT INTO {t} (id, i, f, s, b, d) VALUES (?, ?, ?, ?, ?, ?)"),
            row,
        )
        .unwrap();
    }
    tx.commit().unwrap();
    let mut tx = cx.store.begin(Isolation::ReadCommitted).unwrap();
    let got = tx
        .query(&format!("SELECT id, i, f, s, b FROM {t} ORDER BY id"), &[])
        .unwrap();
    assert_eq!(got.len(), rows.len());
    for (g, want) in got.iter().zip(&rows) {
        assert_eq!(g.values(), &want[..5], "row {:?}", want[0]);
    }
    // Exact decimals come back as their text (SQLite has none: it stores numbers).
    if cx.dialect() != Dialect::Sqlite {
        let d: Vec<Option<String>> = tx
            .query(&format!("SELECT d FROM {t} ORDER BY id"), &[])
            .unwrap()
            .iter()
            .map(|r| r.get::<Option<String>>(0).unwrap())
            .collect();
        assert_eq!(
            d,
            [
                None,
                Some("42.00".into()),
                Some("-12.34".into()),
                Some("0.50".into()),
                None
            ]
        );
    }
    let as_f64 = tx
        .query(&format!("SELECT d FROM {t} WHERE id = ?"), &[3.into()])
        .unwrap()[0]
        .get::<f64>(0)
        .unwrap();
    assert_eq!(as_f64, -12.34);
    // Parameters in conditions, NULL parameters, typed getters.
    let r = tx
        .query(
            &format!("SELECT id FROM {t} WHERE i < ? AND s = ?"),
            &[0.into(), "".into()],
        )
        .unwrap();
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].get::<i32>(0).unwrap(), 3);
    let r = tx
        .query(
            &format!("SELECT COUNT(*) FROM {t} WHERE b = ?"),
            &[vec![0u8, 1, 2, 255].into()],
        )
        .unwrap();
    assert_eq!(r[0].get::<u64>(0).unwrap(), 1);
    let r = tx
        .query(&format!("SELECT i, s FROM {t} WHERE id = ?"), &[1.into()])
        .unwrap();
    assert_eq!(r[0].get::<Option<i64>>("i").unwrap(), None);
    assert!(is_invalid(r[0].get::<i64>("i")));
    assert!(is_invalid(r[0].get::<i64>("nope")));
    tx.execute(
        &format!("UPDATE {t} SET s = ? WHERE id = ?"),
        &[SqlValue::Null, 2.into()],
    )
    .unwrap();
    let r = tx
        .query(&format!("SELECT s FROM {t} WHERE id = ?"), &[2.into()])
        .unwrap();
    assert!(r[0].values()[0].is_null());
    tx.rollback().unwrap();
}

fn sql_dates_and_times_read_as_text(cx: &Ctx) {
    let t = cx.table("dates");
    let (date, datetime, time) = match cx.dialect() {
        Dialect::MySql => ("DATE", "DATETIME(6)", "TIME(6)"),
        _ => ("DATE", "TIMESTAMP", "TIME"),
    };
    cx.store
        .execute_batch(&format!(
            "CREATE TABLE {t} (id BIGINT PRIMARY KEY, d {date}, ts {datetime}, tm {time}){}",
            cx.engine_suffix()
        ))
        .unwrap();
    let rows = [
        [
            "2024-02-29",
            "2024-02-29 13:45:01.250000",
            "13:45:01.250000",
        ],
        ["1999-12-31", "1999-12-31 23:59:59", "00:00:00"],
    ];
    let mut tx = cx.store.begin(Isolation::ReadCommitted).unwrap();
    for (i, [d, ts, tm]) in rows.iter().enumerate() {
        tx.execute(
            &format!("INSERT INTO {t} VALUES (?, ?, ?, ?)"),
            &[(i as i64).into(), (*d).into(), (*ts).into(), (*tm).into()],
        )
        .unwrap();
    }
    let got = tx
        .query(&format!("SELECT d, ts, tm FROM {t} ORDER BY id"), &[])
        .unwrap();
    for (row, want) in got.iter().zip(&rows) {
        let got: Vec<String> = (0..3).map(|i| row.get::<String>(i).unwrap()).collect();
        assert_eq!(got, want);
    }
    tx.commit().unwrap();
}

fn sql_unique_violation_is_constraint(cx: &Ctx) {
    let t = cx.table("uniq");
    cx.store
        .execute_batch(&format!(
            "CREATE TABLE {t} (id BIGINT PRIMARY KEY, email VARCHAR(100) NOT NULL UNIQUE){}",
            cx.engine_suffix()
        ))
        .unwrap();
    let mut tx = cx.store.begin(Isolation::ReadCommitted).unwrap();
    tx.execute(
        &format!("INSERT INTO {t} VALUES (?, ?)"),
        &[1.into(), "a@x".into()],
    )
    .unwrap();
    let r = tx.execute(
        &format!("INSERT INTO {t} VALUES (?, ?)"),
        &[2.into(), "a@x".into()],
    );
    assert!(matches!(r, Err(StoreError::Constraint(_))), "{r:?}");
    drop(tx);
    let mut tx = cx.store.begin(Isolation::ReadCommitted).unwrap();
    tx.execute(
        &format!("INSERT INTO {t} VALUES (?, ?)"),
        &[1.into(), "a@x".into()],
    )
    .unwrap();
    tx.commit().unwrap();
    let mut tx = cx.store.begin(Isolation::ReadCommitted).unwrap();
    let r = tx.execute(
        &format!("INSERT INTO {t} VALUES (?, ?)"),
        &[1.into(), "b@x".into()],
    );
    assert!(matches!(r, Err(StoreError::Constraint(_))), "{r:?}");
    drop(tx);
    let mut tx = cx.store.begin(Isolation::ReadCommitted).unwrap();
    let r = tx.execute(
        &format!("INSERT INTO {t} VALUES (?, ?)"),
        &[3.into(), SqlValue::Null],
    );
    assert!(
        matches!(r, Err(StoreError::Constraint(_))),
        "NOT NULL: {r:?}"
    );
}

/// The same on every backend (PostgreSQL's rule): after a statement fails, the transaction can only
/// be rolled back; commit returns the first error and nothing of the transaction is kept.
fn sql_failed_statement_spoils_the_transaction(cx: &Ctx) {
    let t = cx.table("spoiled");
    cx.store
        .execute_batch(&format!(
            "CREATE TABLE {t} (id BIGINT PRIMARY KEY){}",
            cx.engine_suffix()
        ))
        .unwrap();
    let insert = format!("INSERT INTO {t} VALUES (?)");
    let mut tx = cx.store.begin(Isolation::ReadCommitted).unwrap();
    tx.execute(&insert, &[1.into()]).unwrap();
    let first = tx.execute(&insert, &[1.into()]);
    assert!(matches!(first, Err(StoreError::Constraint(_))), "{first:?}");
    assert!(is_invalid(tx.execute(&insert, &[2.into()])));
    assert!(is_invalid(tx.query("SELECT 1", &[])));
    assert_eq!(tx.commit().err(), first.err());
    let mut tx = cx.store.begin(Isolation::ReadCommitted).unwrap();
    let n = tx.query(&format!("SELECT COUNT(*) FROM {t}"), &[]).unwrap()[0]
        .get::<i64>(0)
        .unwrap();
    assert_eq!(n, 0, "nothing of the spoiled transaction was committed");
    tx.commit().unwrap();
}

/// `execute_all` (one pipeline on PostgreSQL) runs its statements in the order given, each seeing
/// the ones before, and counts the rows of each; the first that fails is named by its index, with
/// the counts of those before it, and spoils the transaction, as a failed `execute` does.
fn sql_statements_run_together_in_order(cx: &Ctx) {
    let t = cx.table("together");
    cx.store
        .execute_batch(&format!(
            "CREATE TABLE {t} (id BIGINT PRIMARY KEY, v BIGINT NOT NULL){}",
            cx.engine_suffix()
        ))
        .unwrap();
    let insert = format!("INSERT INTO {t} (id, v) VALUES (?, ?)");
    let double = format!("UPDATE {t} SET v = v * 2 WHERE id <= ?");
    let add = format!("UPDATE {t} SET v = v + 1 WHERE id = ?");
    let rows: Vec<[SqlValue; 2]> = (1..=40).map(|i: i64| [i.into(), i.into()]).collect();
    let mut statements: Vec<(&str, &[SqlValue])> =
        rows.iter().map(|r| (insert.as_str(), &r[..])).collect();
    let upto: [SqlValue; 1] = [3.into()];
    let one: [SqlValue; 1] = [1.into()];
    let missing: [SqlValue; 1] = [99.into()];
    statements.extend([
        (double.as_str(), &upto[..]),
        (add.as_str(), &one[..]),
        (double.as_str(), &one[..]),
        (add.as_str(), &missing[..]),
    ]);
    let mut tx = cx.store.begin(Isolation::ReadCommitted).unwrap();
    let changed = tx.execute_all(&statements).unwrap();
    let mut expected = vec![1; 40];
    expected.extend([3, 1, 1, 0]);
    assert_eq!(changed, expected);
    tx.commit().unwrap();
    let mut tx = cx.store.begin(Isolation::ReadCommitted).unwrap();
    let v = |tx: &mut Box<dyn SqlTransaction + '_>, id: i64| {
        tx.query(&format!("SELECT v FROM {t} WHERE id = ?"), &[id.into()])
            .unwrap()[0]
            .get::<i64>(0)
            .unwrap()
    };
    // id 1: 1, doubled, plus one, doubled: in that order only.
    assert_eq!((v(&mut tx, 1), v(&mut tx, 2), v(&mut tx, 4)), (6, 4, 4));
    tx.commit().unwrap();

    // A duplicate key third: named by its index, and nothing of the transaction is kept.
    let again: [SqlValue; 2] = [1.into(), 0.into()];
    let fresh: [SqlValue; 2] = [41.into(), 41.into()];
    let failing: Vec<(&str, &[SqlValue])> = vec![
        (add.as_str(), &one[..]),
        (insert.as_str(), &fresh[..]),
        (insert.as_str(), &again[..]),
        (add.as_str(), &one[..]),
    ];
    let mut tx = cx.store.begin(Isolation::ReadCommitted).unwrap();
    let failed = tx.execute_all(&failing).unwrap_err();
    assert_eq!(failed.index, 2, "{failed:?}");
    assert_eq!(
        failed.changed,
        [1, 1],
        "the counts of the statements before it"
    );
    assert!(
        matches!(failed.error, StoreError::Constraint(_)),
        "{failed:?}"
    );
    assert!(is_invalid(tx.execute(&add, &one)));
    assert!(matches!(tx.commit(), Err(StoreError::Constraint(_))));
    let mut tx = cx.store.begin(Isolation::ReadCommitted).unwrap();
    assert_eq!(v(&mut tx, 1), 6, "nothing of the failed pipeline was kept");
    let n = tx.query(&format!("SELECT COUNT(*) FROM {t}"), &[]).unwrap()[0]
        .get::<i64>(0)
        .unwrap();
    assert_eq!(n, 40);
    tx.commit().unwrap();
}

fn sql_foreign_key_violation_is_constraint(cx: &Ctx) {
    let parent = cx.table("fk_parent");
    let child = cx.table("fk_child");
    let e = cx.engine_suffix();
    cx.store
        .execute_batch(&format!(
            "CREATE TABLE {parent} (id BIGINT PRIMARY KEY){e}; \
             CREATE TABLE {child} (id BIGINT PRIMARY KEY, parent_id BIGINT NOT NULL REFERENCES {parent} (id)){e}"
        ))
        .unwrap();
    if cx.dialect() == Dialect::MySql {
        // MySQL ignores inline REFERENCES; MariaDB honours it. Add the constraint explicitly for both.
        let _ = cx.store.execute_batch(&format!("ALTER TABLE {child} ADD CONSTRAINT {child}_fk FOREIGN KEY (parent_id) REFERENCES {parent} (id)"));
    }
    let mut tx = cx.store.begin(Isolation::ReadCommitted).unwrap();
    tx.execute(&format!("INSERT INTO {parent} VALUES (?)"), &[1.into()])
        .unwrap();
    tx.execute(
        &format!("INSERT INTO {child} VALUES (?, ?)"),
        &[1.into(), 1.into()],
    )
    .unwrap();
    tx.commit().unwrap();
    let mut tx = cx.store.begin(Isolation::ReadCommitted).unwrap();
    let r = tx.execute(
        &format!("INSERT INTO {child} VALUES (?, ?)"),
        &[2.into(), 99.into()],
    );
    assert!(
        matches!(r, Err(StoreError::Constraint(_))),
        "child without parent: {r:?}"
    );
    drop(tx);
    let mut tx = cx.store.begin(Isolation::ReadCommitted).unwrap();
    let r = tx.execute(&format!("DELETE FROM {parent} WHERE id = ?"), &[1.into()]);
    assert!(
        matches!(r, Err(StoreError::Constraint(_))),
        "parent with a child: {r:?}"
    );
}

fn sql_serialization_conflict(cx: &Ctx) {
    let t = cx.table("serial");
    cx.store
        .execute_batch(&format!("CREATE TABLE {t} (id BIGINT PRIMARY KEY, v BIGINT NOT NULL){}; INSERT INTO {t} VALUES (1, 10)", cx.engine_suffix()))
        .unwrap();
    match cx.dialect() {
        Dialect::Sqlite => {
            // SQLite runs one writing transaction at a time: two transactions cannot conflict, the
            // second waits for the first, and gives up after the timeout with Conflict (the
            // contention is over by the time a retry runs).
            let short =
                cx.open_with(StoreOptions::default().with_timeout(Duration::from_millis(200)));
            let tx = short.begin(Isolation::Serializable).unwrap();
            assert!(matches!(
                short.begin(Isolation::Serializable).err(),
                Some(StoreError::Conflict(_))
            ));
            drop(tx);
        }
        Dialect::Postgres => {
            // Write skew under SERIALIZABLE: both read the sum, both insert; one must fail.
            let mut t1 = cx.store.begin(Isolation::Serializable).unwrap();
            let mut t2 = cx.store.begin(Isolation::Serializable).unwrap();
            let sum = format!("SELECT SUM(v) FROM {t}");
            t1.query(&sum, &[]).unwrap();
            t2.query(&sum, &[]).unwrap();
            t1.execute(
                &format!("INSERT INTO {t} VALUES (?, ?)"),
                &[2.into(), 1.into()],
            )
            .unwrap();
            let r2 = t2.execute(
                &format!("INSERT INTO {t} VALUES (?, ?)"),
                &[3.into(), 1.into()],
            );
            t1.commit().unwrap();
            let r = r2.and_then(|_| t2.commit());
            assert!(
                matches!(&r, Err(e @ StoreError::Conflict(_)) if e.is_retryable()),
                "{r:?}"
            );
        }
        Dialect::MySql => {
            // Under SERIALIZABLE, InnoDB reads take shared locks: both read the row, both update it,
            // and one is chosen as the deadlock victim.
            let mut t1 = cx.store.begin(Isolation::Serializable).unwrap();
            let mut t2 = cx.store.begin(Isolation::Serializable).unwrap();
            let read = format!("SELECT v FROM {t} WHERE id = 1");
            let write = format!("UPDATE {t} SET v = v + 1 WHERE id = 1");
            t1.query(&read, &[]).unwrap();
            t2.query(&read, &[]).unwrap();
            let (r1, r2) = thread::scope(|s| {
                let h = s.spawn(|| {
                    let r = t1.execute(&write, &[]);
                    (r, t1)
                });
                thread::sleep(Duration::from_millis(300));
                let r2 = t2.execute(&write, &[]);
                if r2.is_ok() {
                    // t2 won; t1 was the victim or waits for t2.
                    let _ = t2.commit();
                } else {
                    drop(t2);
                }
                let (r1, t1) = h.join().unwrap();
                if r1.is_ok() {
                    t1.commit().unwrap();
                }
                (r1, r2)
            });
            let conflicts = [&r1, &r2]
                .iter()
                .filter(|r| matches!(r, Err(StoreError::Conflict(_))))
                .count();
            assert_eq!(conflicts, 1, "{r1:?} {r2:?}");
            assert!(r1.is_ok() || r2.is_ok());
        }
    }
}

/// A transaction waiting for a lock held by another gives up within the timeout, with an error that
/// says to retry (or Timeout).
fn lock_wait_is_bounded(cx: &Ctx) {
    let c = cx.coll("lockwait", &[]);
    cx.store.insert(&c, "x", &doc(json!({"n": 0}))).unwrap();
    let timeout = Duration::from_millis(1000);
    let short = cx.open_with(
        StoreOptions::default()
            .with_timeout(timeout)
            .with_pool_size(2),
    );
    let mut holder = cx.store.begin(Isolation::ReadCommitted).unwrap();
    let table = match cx.dialect() {
        Dialect::MySql => format!("`{c}`"),
        _ => format!("\"{c}\""),
    };
    holder
        .execute(
            &format!("UPDATE {table} SET doc = doc WHERE id = ?"),
            &["x".into()],
        )
        .unwrap();
    // The holder lets go only after this returns: without its timeout the update would wait.
    let r = short.update(&c, "x", &changes(json!({"$inc": {"n": 1}})));
    assert!(
        matches!(r, Err(StoreError::Conflict(_) | StoreError::Timeout(_))),
        "{r:?}"
    );
    holder.rollback().unwrap();
    assert_eq!(
        short
            .update(&c, "x", &changes(json!({"$inc": {"n": 1}})))
            .unwrap()
            .unwrap()["n"],
        json!(1)
    );
}

fn long_statement_times_out(cx: &Ctx) {
    let timeout = Duration::from_millis(500);
    let short = cx.open_with(
        StoreOptions::default()
            .with_timeout(timeout)
            .with_pool_size(2),
    );
    let sql = match cx.dialect() {
        Dialect::Sqlite => {
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT COUNT(*) FROM c"
        }
        Dialect::Postgres => "SELECT pg_sleep(3)",
        Dialect::MySql => "SELECT SLEEP(3)",
    };
    // Cut short: uninterrupted, the statement would succeed.
    let mut tx = short.begin(Isolation::ReadCommitted).unwrap();
    let r = tx.query(sql, &[]);
    assert!(
        matches!(r, Err(StoreError::Timeout(t)) if t == timeout),
        "{r:?}"
    );
    drop(tx);
    // The store still works afterwards (its timed-out connection is replaced by a new one, which
    // a loaded machine may take a moment to open: try a few times).
    let works = (0..5).any(|_| {
        short
            .begin(Isolation::ReadCommitted)
            .and_then(|mut tx| tx.query("SELECT 1", &[]))
            .is_ok_and(|rows| rows[0].get::<i64>(0).ok() == Some(1))
    });
    assert!(works, "the store recovers after a statement timeout");
}

// ---------------------------------------------------------------------------------------------
// Fault injection
// ---------------------------------------------------------------------------------------------

fn faulty(cx: &Ctx, timeout: Duration) -> FaultyStore {
    FaultyStore::new(
        cx.open_with(
            StoreOptions::default()
                .with_timeout(timeout)
                .with_pool_size(4),
        ),
    )
}

fn fault_fail_all(cx: &Ctx) {
    let c = cx.coll("failall", &[]);
    let store = faulty(cx, Duration::from_secs(10));
    let faults = store.faults();
    store.insert(&c, "x", &doc(json!({"n": 1}))).unwrap();
    faults.set(FaultMode::FailAll);
    assert!(matches!(
        store.get(&c, "x"),
        Err(StoreError::Unavailable(_))
    ));
    assert!(matches!(
        store.insert(&c, "y", &doc(json!({}))),
        Err(StoreError::Unavailable(_))
    ));
    assert!(matches!(
        store.update(&c, "x", &changes(json!({"$inc": {"n": 1}}))),
        Err(StoreError::Unavailable(_))
    ));
    assert!(matches!(
        store.begin(Isolation::ReadCommitted).err(),
        Some(StoreError::Unavailable(_))
    ));
    assert!(matches!(
        store.scan(&c, None, Bound::Unbounded, Bound::Unbounded, 10),
        Err(StoreError::Unavailable(_))
    ));
    assert!(matches!(
        store.get_text(&c, "x"),
        Err(StoreError::Unavailable(_))
    ));
    assert!(matches!(
        store.get_many_text(&c, &["x"]),
        Err(StoreError::Unavailable(_))
    ));
    // A transaction begun while healthy fails at its next statement and at commit.
    faults.set(FaultMode::Healthy);
    let mut tx = store.begin(Isolation::ReadCommitted).unwrap();
    faults.set(FaultMode::FailAll);
    assert!(matches!(
        tx.query("SELECT 1", &[]),
        Err(StoreError::Unavailable(_))
    ));
    assert!(matches!(tx.commit(), Err(StoreError::Unavailable(_))));
    faults.set(FaultMode::Healthy);
    assert_eq!(store.get(&c, "x").unwrap().unwrap()["n"], json!(1));
    assert!(StoreError::Unavailable(String::new()).is_transient());
    assert!(!StoreError::Unavailable(String::new()).is_retryable());
}

fn fault_hang(cx: &Ctx) {
    let c = cx.coll("hang", &[]);
    let timeout = Duration::from_millis(300);
    let store = faulty(cx, timeout);
    let faults = store.faults();
    faults.set(FaultMode::Hang);
    for call in 0..3 {
        let start = Instant::now();
        let r = match call {
            0 => store.get(&c, "x").map(drop),
            1 => store.put(&c, "x", &doc(json!({}))),
            _ => store.begin(Isolation::ReadCommitted).map(drop),
        };
        let took = start.elapsed();
        assert_eq!(r, Err(StoreError::Timeout(timeout)));
        assert!(took >= timeout, "call {call} gave up after {took:?}");
    }
    // Switching back wakes a hanging call early, still with Timeout.
    let long = faulty(cx, Duration::from_secs(30));
    let long_faults = long.faults();
    long_faults.set(FaultMode::Hang);
    thread::scope(|s| {
        s.spawn(|| {
            thread::sleep(Duration::from_millis(100));
            long_faults.set(FaultMode::Healthy);
        });
        assert!(matches!(long.count(&c), Err(StoreError::Timeout(_))));
    });
    faults.set(FaultMode::Healthy);
    assert_eq!(store.get(&c, "x").unwrap(), None);
}

fn fault_refuse_writes_and_counts(cx: &Ctx) {
    let c = cx.coll("refuse", &[]);
    let t = cx.table("refuse_sql");
    cx.store
        .execute_batch(&format!(
            "CREATE TABLE {t} (id BIGINT PRIMARY KEY){}",
            cx.engine_suffix()
        ))
        .unwrap();
    let store = faulty(cx, Duration::from_secs(2));
    let faults = store.faults();
    store.insert(&c, "x", &doc(json!({"n": 1}))).unwrap();
    faults.reset_counts();
    faults.set(FaultMode::RefuseWrites);
    assert_eq!(store.get(&c, "x").unwrap().unwrap()["n"], json!(1));
    assert_eq!(store.count(&c).unwrap(), 1);
    assert_eq!(store.get_many(&c, &["x"]).unwrap().len(), 1);
    assert_eq!(
        store
            .scan(&c, None, Bound::Unbounded, Bound::Unbounded, 5)
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        store.insert(&c, "y", &doc(json!({}))),
        Err(StoreError::WriteRefused)
    );
    assert_eq!(
        store.put(&c, "x", &doc(json!({}))),
        Err(StoreError::WriteRefused)
    );
    assert_eq!(
        store.update(&c, "x", &changes(json!({"$set": {"n": 2}}))),
        Err(StoreError::WriteRefused)
    );
    assert_eq!(store.delete(&c, "x"), Err(StoreError::WriteRefused));
    assert_eq!(
        store.insert_many(&c, &[("z".into(), doc(json!({})))]),
        Err(StoreError::WriteRefused)
    );
    assert_eq!(
        store.execute_batch("SELECT 1"),
        Err(StoreError::WriteRefused)
    );
    let mut tx = store.begin(Isolation::ReadCommitted).unwrap();
    assert_eq!(
        tx.query(&format!("SELECT COUNT(*) FROM {t}"), &[])
            .unwrap()
            .len(),
        1
    );
    let insert = format!("INSERT INTO {t} VALUES (?)");
    assert_eq!(
        tx.execute(&insert, &[1.into()]),
        Err(StoreError::WriteRefused)
    );
    let (one, two): ([SqlValue; 1], [SqlValue; 1]) = ([1.into()], [2.into()]);
    let refused = tx
        .execute_all(&[(insert.as_str(), &one[..]), (insert.as_str(), &two[..])])
        .unwrap_err();
    assert_eq!(
        (refused.index, refused.error, refused.changed),
        (0, StoreError::WriteRefused, vec![])
    );
    tx.commit().unwrap();
    let counts = faults.counts();
    assert_eq!(
        (counts.reads, counts.writes, counts.transactions),
        (5, 8, 1),
        "{counts:?}"
    );
    assert_eq!(faults.reads(), 5);
    faults.set(FaultMode::Healthy);
    assert_eq!(
        store.get(&c, "x").unwrap().unwrap()["n"],
        json!(1),
        "refused writes changed nothing"
    );
    assert_eq!(faults.counts().reads, 6);
}

// ---------------------------------------------------------------------------------------------
// A real store that is down or stops answering
// ---------------------------------------------------------------------------------------------

/// A TCP proxy in front of the real server that can freeze: it keeps the connections open but stops
/// passing bytes, as a hung server (SIGSTOP, a dead disk) would.
struct Proxy {
    port: u16,
    frozen: Arc<AtomicBool>,
}

impl Proxy {
    fn start(target: std::net::SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let frozen = Arc::new(AtomicBool::new(false));
        let f = frozen.clone();
        thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = TcpStream::connect(target) else {
                    continue;
                };
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    let f = f.clone();
                    thread::spawn(move || {
                        let mut buf = [0u8; 16384];
                        loop {
                            let n = match std::io::Read::read(&mut from, &mut buf) {
                                Ok(0) | Err(_) => return,
                                Ok(n) => n,
                            };
                            while f.load(Ordering::SeqCst) {
                                thread::sleep(Duration::from_millis(20));
                            }
                            if to.write_all(&buf[..n]).is_err() {
                                return;
                            }
                        }
                    });
                }
            }
        });
        Proxy { port, frozen }
    }
}

fn server_that_stops_answering_times_out(cx: &Ctx) {
    if cx.kind == Kind::Sqlite {
        return; // in-process: nothing to hang (long statements are covered by long_statement_times_out)
    }
    let c = cx.coll("frozen", &[]);
    cx.store.insert(&c, "x", &doc(json!({"n": 1}))).unwrap();
    let (host_port, rest) = {
        let after_at = cx.url.rsplit_once('@').map(|(_, r)| r).unwrap_or(&cx.url);
        let after_at = after_at
            .trim_start_matches("postgres://")
            .trim_start_matches("mysql://");
        let (hp, rest) = after_at.split_once('/').unwrap_or((after_at, ""));
        (hp.to_owned(), rest.to_owned())
    };
    let target = std::net::ToSocketAddrs::to_socket_addrs(&host_port)
        .unwrap()
        .next()
        .unwrap();
    let proxy = Proxy::start(target);
    let url = cx.url.replace(
        &format!("{host_port}/{rest}"),
        &format!("127.0.0.1:{}/{rest}", proxy.port),
    );
    let timeout = Duration::from_millis(500);
    let store = open(
        &url,
        &StoreOptions::default()
            .with_timeout(timeout)
            .with_pool_size(2),
    )
    .unwrap();
    assert_eq!(store.get(&c, "x").unwrap().unwrap()["n"], json!(1));
    // A pipeline whose replies stop coming (its statements prepared before the freeze), on a
    // store of its own so that the one above keeps its idle connection.
    let statements: [(&str, &[SqlValue]); 2] = [("SELECT 1", &[]), ("SELECT 2", &[])];
    let piped = open(&url, &StoreOptions::default().with_timeout(timeout)).unwrap();
    let mut pipelined = (cx.kind == Kind::Postgres).then(|| {
        let mut tx = piped.begin(Isolation::ReadCommitted).unwrap();
        assert_eq!(tx.execute_all(&statements).unwrap(), [1, 1]);
        tx
    });
    proxy.frozen.store(true, Ordering::SeqCst);
    if let Some(tx) = pipelined.as_mut() {
        let failed = tx.execute_all(&statements).unwrap_err();
        assert_eq!(
            (failed.index, failed.error, failed.changed),
            (0, StoreError::Timeout(timeout), vec![])
        );
    }
    drop(pipelined);
    let r = store.get(&c, "x");
    assert_eq!(r, Err(StoreError::Timeout(timeout)));
    let r = store.update(&c, "x", &changes(json!({"$inc": {"n": 1}})));
    assert!(
        matches!(r, Err(StoreError::Timeout(_) | StoreError::Unavailable(_))),
        "{r:?}"
    );
    // Thawed, the store recovers with fresh connections.
    proxy.frozen.store(false, Ordering::SeqCst);
    let mut ok = false;
    for _ in 0..5 {
        if store.get(&c, "x").is_ok() {
            ok = true;
            break;
        }
    }
    assert!(ok, "the store recovers");
}

/// The API is synchronous, but a caller may be a task of an async runtime that blocks its thread:
/// that must work (PostgreSQL's driver is itself async and must not nest runtimes).
fn called_from_an_async_runtime(cx: &Ctx) {
    let c = cx.coll("async", &[]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async {
        cx.store.insert(&c, "x", &doc(json!({"n": 1}))).unwrap();
        assert_eq!(
            cx.store
                .update(&c, "x", &changes(json!({"$inc": {"n": 1}})))
                .unwrap()
                .unwrap()["n"],
            json!(2)
        );
        let mut tx = cx.store.begin(Isolation::ReadCommitted).unwrap();
        assert_eq!(tx.query("SELECT 1", &[]).unwrap().len(), 1);
        tx.commit().unwrap();
    });
    // A store opened inside a runtime and dropped there too.
    rt.block_on(async {
        let other = cx.open_with(StoreOptions::default().with_pool_size(1));
        assert_eq!(other.get(&c, "x").unwrap().unwrap()["n"], json!(2));
        drop(other);
    });
}

/// `sqlite:PATH?synchronous=...` sets how every connection of the pool syncs its commits.
#[test]
fn sqlite_synchronous_is_set_on_every_connection() {
    let path = std::env::temp_dir().join(format!("{}.db", unique("sync")));
    for (setting, expected) in [("", 1), ("?synchronous=full", 2), ("?synchronous=off", 0)] {
        let store = open(
            &format!("sqlite:{}{setting}", path.display()),
            &StoreOptions::default(),
        )
        .unwrap();
        // Two transactions open at once hold two connections of the pool.
        let mut first = store.begin_read(Isolation::ReadCommitted).unwrap();
        let mut second = store.begin_read(Isolation::ReadCommitted).unwrap();
        for tx in [&mut first, &mut second] {
            let rows = tx.query("PRAGMA synchronous", &[]).unwrap();
            assert_eq!(rows[0].get::<i64>(0).unwrap(), expected, "{setting:?}");
        }
    }
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
}

/// Stores that are down: a closed port, a server that accepts but never speaks, an unwritable
/// SQLite path. Each gives a typed error quickly; these run without any server.
#[test]
fn store_that_is_down_is_unavailable() {
    let closed = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let options = StoreOptions::default().with_timeout(Duration::from_millis(500));
    let mut urls = vec!["sqlite:/nonexistent-dir/cads/x.db".to_owned()];
    if cfg!(feature = "postgres") {
        urls.push(format!("postgres://cads:cads@127.0.0.1:{closed}/cads"));
    }
    if cfg!(feature = "mysql") {
        urls.push(format!("mysql://cads:cads@127.0.0.1:{closed}/cads"));
    }
    for url in urls {
        let r = open(&url, &options);
        assert!(
            matches!(r, Err(StoreError::Unavailable(_))),
            "{url}: {:?}",
            r.err()
        );
    }
    // Accepts connections, never answers.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let _keep = thread::spawn(move || {
        let mut held = Vec::new();
        for s in silent.incoming() {
            held.push(s);
        }
    });
    let mut urls = Vec::new();
    if cfg!(feature = "postgres") {
        urls.push(format!("postgres://cads:cads@127.0.0.1:{port}/cads"));
    }
    if cfg!(feature = "mysql") {
        urls.push(format!("mysql://cads:cads@127.0.0.1:{port}/cads"));
    }
    for url in urls {
        let r = open(&url, &options);
        assert!(
            matches!(r, Err(StoreError::Unavailable(_) | StoreError::Timeout(_))),
            "{url}: {:?}",
            r.err()
        );
    }
    // Bad URLs.
    for url in ["redis://x", "postgres://", "mysql://a:b@:x/", "sqlite:"] {
        assert!(
            matches!(
                open(url, &options),
                Err(StoreError::Invalid(_) | StoreError::Unavailable(_))
            ),
            "{url}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Change semantics, backend-independent properties
// ---------------------------------------------------------------------------------------------

mod properties {
    use super::*;
    use proptest::prelude::*;

    fn value() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(json!(null)),
            (-3i64..4).prop_map(|i| json!(i)),
            Just(json!(0.5)),
            prop_oneof![Just("x"), Just("y")].prop_map(|s| json!(s)),
            proptest::collection::vec((0i64..3).prop_map(|i| json!(i)), 0..3)
                .prop_map(Value::Array),
            Just(json!({"x": 1})),
            Just(json!({})),
        ]
    }

    fn field() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("a"),
            Just("b"),
            Just("a.x"),
            Just("a.y"),
            Just("a.x.z"),
            Just("c.d")
        ]
        .prop_map(String::from)
    }

    fn change() -> impl Strategy<Value = Change> {
        (0usize..6, field(), value()).prop_map(|(op, field, value)| {
            let op = Op::ALL[op];
            let value = if op == Op::Inc {
                json!(value.as_i64().unwrap_or(1))
            } else {
                value
            };
            Change::new(op, field, value)
        })
    }

    fn document() -> impl Strategy<Value = Document> {
        proptest::collection::vec((field(), value()), 0..5).prop_map(|sets| {
            let mut d = Document::new();
            for (f, v) in sets {
                let _ = Change::new(Op::Set, f, v).apply(&mut d);
            }
            d
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Applying the idempotent equivalent equals applying the changes, and applying it again
        /// changes nothing.
        #[test]
        fn idempotent_equivalent(before in document(), changes in proptest::collection::vec(change(), 0..6)) {
            let changes = Changes::from(changes);
            let mut after = before.clone();
            match changes.apply(&mut after) {
                Err(_) => {
                    prop_assert_eq!(&after, &before, "a failed apply changes nothing");
                    prop_assert!(changes.idempotent_equivalent(&before).is_err());
                }
                Ok(()) => {
                    let eq = changes.idempotent_equivalent(&before).unwrap();
                    prop_assert!(eq.is_idempotent());
                    let mut once = before.clone();
                    eq.apply(&mut once).unwrap();
                    prop_assert_eq!(&once, &after);
                    eq.apply(&mut once).unwrap();
                    prop_assert_eq!(&once, &after);
                }
            }
        }

        /// Changes classified idempotent, applied twice, give what they give once.
        #[test]
        fn idempotent_sequences(before in document(), changes in proptest::collection::vec(change(), 0..6)) {
            let changes: Changes = changes.into_iter().filter(Change::is_idempotent).collect();
            let mut once = before.clone();
            if changes.is_idempotent() && changes.apply(&mut once).is_ok() {
                let mut twice = once.clone();
                prop_assert!(changes.apply(&mut twice).is_ok());
                prop_assert_eq!(twice, once);
            }
        }

        /// `to_json` reads back into changes with the same effect.
        #[test]
        fn json_round_trip(before in document(), changes in proptest::collection::vec(change(), 0..6)) {
            let changes = Changes::from(changes);
            let back = Changes::from_json(&changes.to_json()).unwrap();
            let (mut a, mut b) = (before.clone(), before.clone());
            prop_assert_eq!(changes.apply(&mut a).is_ok(), back.apply(&mut b).is_ok());
            prop_assert_eq!(a, b);
        }
    }

    #[test]
    fn idempotent_operators_on_one_field_are_not_an_idempotent_sequence() {
        let ch = Changes::new().add_to_set("a", 1).set("a", json!({"x": 1}));
        assert!(ch.changes().iter().all(Change::is_idempotent));
        assert!(!ch.is_idempotent());
        let mut d = Document::new();
        ch.apply(&mut d).unwrap();
        assert!(
            ch.apply(&mut d).is_err(),
            "applied twice, $addToSet meets an object"
        );
        assert!(!Changes::new().set("a", 1).unset("a.b").is_idempotent());
        assert!(Changes::new()
            .set("a.b", 1)
            .unset("a.c")
            .add_to_set("ab", 2)
            .is_idempotent());
    }

    #[test]
    fn from_json_order_is_fixed() {
        // Operators apply in the order of Op::ALL whatever the JSON key order.
        let a = Changes::from_json(&json!({"$inc": {"n": 1}, "$set": {"m": 2}})).unwrap();
        let ops: Vec<Op> = a.changes().iter().map(|c| c.op).collect();
        assert_eq!(ops, [Op::Set, Op::Inc]);
        let array = json!([{"$set": {"n": 1}}, {"$inc": {"n": 1}}]);
        let b = Changes::from_json(&array).unwrap();
        assert_eq!(b.to_json(), array);
        let mut d = Document::new();
        b.apply(&mut d).unwrap();
        assert_eq!(d["n"], json!(2));
    }
}
