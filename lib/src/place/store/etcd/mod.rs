//! The etcd store: locks for jobs on several hosts, kept in an etcd
//! cluster (the v3 API, through its JSON gateway: `wire.rs`).
//!
//! Every key starts with the store's prefix `P` (the URL's path, else
//! `onlyone/`):
//!
//! - `P lease/ROW`: a lock's lease (`ROW` the lock's name, or `NAME#K` for
//!   slot K), attached to an etcd lease of its own whose TTL is the
//!   onlyone lease rounded up to a second. Its value says who holds it
//!   (token, host, pid, uid, command, since, the lock's slots).
//! - **Take**: one transaction that creates the key only if it is absent
//!   (`create_revision == 0`), and only if nothing of the lock and of its
//!   line changed since they were read (every key's `mod_revision` no
//!   later than that read): the key's **revision is the fence**, which
//!   grows with every write to the cluster, so with every take of a lock.
//! - **Renew**: a keep-alive of the key's etcd lease, *then* a read of the
//!   key: held only while the key is there with the same revision and the
//!   same lease (a lease that ran out while the holder waited is never
//!   taken for one that holds). The holder's deadline counts from the
//!   renewal's send, as with any store: the keep-alive sets the lease's
//!   end at the leader's now plus a TTL no shorter than the onlyone lease.
//! - **Release**: the key deleted (if it is still that revision's), then
//!   its etcd lease revoked.
//! - `P stop/ROW`: a stop request, put under the holder's own etcd lease
//!   (it goes with the lease); the holder reads it at each renewal, as the
//!   PostgreSQL store's holder reads its row's flag.
//! - `P wait/NAME/TOKEN`: a waiter in the lock's line, under an etcd lease
//!   of its own that its waiter keeps alive: its ticket is the key's
//!   create revision (first come, first served). `P queue/NAME`: the queue
//!   seat, the waiter's token, under the same lease.
//! - `P event/NAME/ID`: the lock's history, one key an event, read in
//!   the order of their create revisions; at most [`MAX_EVENTS`] a lock
//!   (the oldest go). `P name/NAME` marks a lock that has a history.
//! - `P schedule/NAME`: the schedule a lock's fires last recorded
//!   (`spec`); its `mod_revision` is the version a fire's record names:
//!   one transaction puts it and the fire's events only if it is still the
//!   revision the fire read, so fires on any hosts record each missed
//!   fire once.
//!
//! Whatever a key holds is read like a file another account can write:
//! its JSON read field by field, texts cut, numbers out of range unknown,
//! at most [`MAX_EVENTS`] events, [`MAX_WAITERS`] waiters and
//! [`MAX_NAMES`] locks read back.

mod address;
mod wire;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use super::{
    Claimant, Claimed, LeaseRow, LeaseStore, LineSetup, Renewed, Slot, StoreError, WaiterRow,
    lock_of_row, slot_row,
};
use address::Address;
use wire::{Wire, b64, int, unb64};

/// At most this many events are kept per lock (the oldest go), and read
/// back. An event is at most 2 KiB: a lock's history is at most 2 MiB of
/// the cluster's keyspace (1000 keys), and a few hundred KiB as runs
/// usually write them.
pub const MAX_EVENTS: usize = 1000;

/// At most this many waiters of a lock are read back.
const MAX_WAITERS: usize = 100;

/// At most this many locks are read back by `status`, `check` and
/// `metrics`.
const MAX_NAMES: usize = 10_000;

/// The longest text read from a key (a host, a command): longer is cut.
const MAX_TEXT: usize = 4096;

/// Opens the store at `url` (nothing is sent yet).
pub(crate) fn open_store(url: &str, timeout: Duration) -> Result<Box<dyn LeaseStore>, StoreError> {
    let addr = Address::parse(url, &|k| std::env::var(k).ok()).map_err(StoreError::BadUrl)?;
    Ok(Box::new(EtcdStore::new(addr, timeout)))
}

/// A store in an etcd cluster.
pub struct EtcdStore {
    wire: Wire,
    /// The etcd lease of the last lease renewed: its row, fence and id.
    renewing: std::cell::RefCell<Option<(String, i64, i64)>>,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("url", &self.wire.addr.display)
            .finish()
    }
}

/// A key and what an answer says of it.
#[derive(Debug, Clone)]
struct Kv {
    key: String,
    value: Vec<u8>,
    create: i64,
    modified: i64,
    lease: i64,
}

impl Kv {
    fn read(v: &Value) -> Option<Kv> {
        Some(Kv {
            key: String::from_utf8(unb64(v["key"].as_str()?)?).ok()?,
            value: v["value"].as_str().and_then(unb64).unwrap_or_default(),
            create: int(&v["create_revision"]),
            modified: int(&v["mod_revision"]),
            lease: int(&v["lease"]),
        })
    }

    /// The value as our JSON (an object; anything else reads as empty).
    fn json(&self) -> Value {
        serde_json::from_slice::<Value>(&self.value)
            .ok()
            .filter(Value::is_object)
            .unwrap_or(Value::Null)
    }
}

/// A text field of a value, cut to [`MAX_TEXT`].
fn text(v: &Value, field: &str) -> Option<String> {
    let s = v[field].as_str()?;
    let mut end = s.len().min(MAX_TEXT);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    Some(s[..end].to_owned())
}

fn uint(v: &Value, field: &str) -> Option<u32> {
    v[field].as_u64().and_then(|n| u32::try_from(n).ok())
}

/// A random number, for an event's key.
fn random_u32() -> u32 {
    let mut b = [0u8; 4];
    let _ = rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty());
    u32::from_ne_bytes(b)
}

/// Now, as Unix seconds.
fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The end of the range of every key that starts with `prefix`.
fn prefix_end(prefix: &str) -> String {
    let mut b = prefix.as_bytes().to_vec();
    while let Some(last) = b.pop() {
        if last < 0xff {
            b.push(last + 1);
            return b64(&b);
        }
    }
    b64(&[0])
}

/// A read of one key.
fn get(key: &str) -> Value {
    json!({"request_range": {"key": b64(key.as_bytes())}})
}

/// A read of every key from `from` up to `to` (excluded), in the order of
/// their create revisions (`desc`: newest first), at most `limit`.
fn range(from: &str, to_b64: String, limit: usize, desc: bool) -> Value {
    json!({"request_range": {
        "key": b64(from.as_bytes()),
        "range_end": to_b64,
        "limit": limit.to_string(),
        "sort_target": "CREATE",
        "sort_order": if desc { "DESCEND" } else { "ASCEND" },
    }})
}

/// A read of every key that starts with `prefix`, oldest first.
fn scan(prefix: &str, limit: usize) -> Value {
    range(prefix, prefix_end(prefix), limit, false)
}

fn put(key: &str, value: &[u8], lease: i64) -> Value {
    json!({"request_put": {
        "key": b64(key.as_bytes()),
        "value": b64(value),
        "lease": lease.to_string(),
    }})
}

fn delete(key: &str) -> Value {
    json!({"request_delete_range": {"key": b64(key.as_bytes())}})
}

/// A comparison of `key`'s create revision with `rev`.
fn created(key: &str, result: &str, rev: i64) -> Value {
    json!({"target": "CREATE", "key": b64(key.as_bytes()), "result": result,
           "create_revision": rev.to_string()})
}

/// That nothing from `from` up to `to` was written after revision `rev`.
fn unchanged_since(from: &str, to_b64: String, rev: i64) -> Value {
    json!({"target": "MOD", "key": b64(from.as_bytes()), "range_end": to_b64,
           "result": "LESS", "mod_revision": (rev + 1).to_string()})
}

/// A transaction's answer: whether it succeeded, its revision, and the
/// keys each read of it found.
struct Txn {
    succeeded: bool,
    revision: i64,
    reads: Vec<Vec<Kv>>,
}

/// An etcd lease's TTL for an onlyone lease: whole seconds, rounded up.
fn ttl_of(lease: Duration) -> i64 {
    i64::try_from(lease.as_millis().div_ceil(1000).max(1)).unwrap_or(i64::MAX)
}

impl EtcdStore {
    fn new(addr: Address, timeout: Duration) -> EtcdStore {
        EtcdStore {
            wire: Wire::new(addr, timeout),
            renewing: std::cell::RefCell::new(None),
        }
    }

    fn key(&self, rest: &str) -> String {
        format!("{}{rest}", self.wire.addr.prefix)
    }

    fn url(&self) -> String {
        self.wire.addr.display.clone()
    }

    /// A transaction: `compare`, then `success` or `failure`.
    fn txn(
        &self,
        compare: Vec<Value>,
        success: Vec<Value>,
        failure: Vec<Value>,
    ) -> Result<Txn, StoreError> {
        let v = self.wire.call(
            "kv/txn",
            &json!({"compare": compare, "success": success, "failure": failure}),
        )?;
        let reads = v["responses"]
            .as_array()
            .map(|rs| {
                rs.iter()
                    .map(|r| {
                        r["response_range"]["kvs"]
                            .as_array()
                            .map(|kvs| kvs.iter().filter_map(Kv::read).collect())
                            .unwrap_or_default()
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(Txn {
            succeeded: v["succeeded"].as_bool().unwrap_or(false),
            revision: int(&v["header"]["revision"]),
            reads,
        })
    }

    /// Reads, at one revision: the keys each of `reads` finds.
    fn read(&self, reads: Vec<Value>) -> Result<Txn, StoreError> {
        self.txn(vec![], reads, vec![])
    }

    /// A new etcd lease of `ttl` seconds: its id.
    fn grant(&self, ttl: i64) -> Result<i64, StoreError> {
        let v = self
            .wire
            .call("lease/grant", &json!({"TTL": ttl.to_string()}))?;
        match int(&v["ID"]) {
            0 => Err(self.odd("lease grant", &v)),
            id => Ok(id),
        }
    }

    /// Ends the etcd lease `id` and its keys; one already gone is no error.
    fn revoke(&self, id: i64) -> Result<(), StoreError> {
        match self
            .wire
            .call("lease/revoke", &json!({"ID": id.to_string()}))
        {
            Err(StoreError::Server { detail, .. }) if detail.contains("lease not found") => Ok(()),
            other => other.map(drop),
        }
    }

    /// Keeps the etcd lease `id` alive: false when it is gone.
    fn keep_alive(&self, id: i64) -> Result<bool, StoreError> {
        match self
            .wire
            .call("lease/keepalive", &json!({"ID": id.to_string()}))
        {
            Ok(v) => Ok(int(&v["result"]["TTL"]) > 0),
            Err(StoreError::Server { detail, .. }) if detail.contains("lease not found") => {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// The milliseconds left of the etcd lease `id` (negative: gone).
    fn left_ms(&self, id: i64) -> Result<i64, StoreError> {
        let v = self
            .wire
            .call("kv/lease/timetolive", &json!({"ID": id.to_string()}))?;
        let ttl = int(&v["TTL"]);
        Ok(
            if ttl < 0 || v.get("TTL").is_none() && int(&v["grantedTTL"]) == 0 {
                -1
            } else {
                ttl.saturating_mul(1000).max(1)
            },
        )
    }

    /// An answer that is not etcd's.
    fn odd(&self, what: &str, v: &Value) -> StoreError {
        StoreError::BadRow {
            url: self.url(),
            what: "answer",
            source: format!("a {what} without what it gives: {v}").into(),
        }
    }

    /// The lease row a key holds (`left_ms` from its etcd lease).
    fn lease_row(&self, kv: &Kv, stop: Option<&Kv>) -> Result<LeaseRow, StoreError> {
        let row = kv.key.strip_prefix(&self.key("lease/")).unwrap_or(&kv.key);
        let (name, slot) = lock_of_row(row);
        let v = kv.json();
        let token = text(&v, "token").ok_or_else(|| StoreError::BadRow {
            url: self.url(),
            what: "lease key",
            source: format!("`{}` has no token", kv.key).into(),
        })?;
        let left_ms = self.left_ms(kv.lease)?;
        let now = unix_now();
        Ok(LeaseRow {
            name: name.to_owned(),
            slot,
            slots: uint(&v, "slots").unwrap_or(1).max(1),
            epoch: kv.create,
            token,
            host: text(&v, "host"),
            pid: uint(&v, "pid"),
            uid: uint(&v, "uid"),
            cmd: text(&v, "cmd"),
            since: v["since"].as_f64().filter(|s| s.is_finite()).unwrap_or(now),
            until: now + left_ms as f64 / 1000.0,
            left_ms,
            stop_requested: stop.is_some_and(|s| s.value == kv.create.to_string().as_bytes()),
        })
    }

    /// The value of a lease's or a waiter's key.
    fn who_value(who: &Claimant<'_>, extra: Value) -> Vec<u8> {
        let mut v = json!({
            "token": who.token, "host": who.host, "pid": who.pid, "uid": who.uid,
            "cmd": who.cmd, "since": unix_now(),
        });
        if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
            o.extend(e.clone());
        }
        serde_json::to_vec(&v).unwrap_or_default()
    }

    /// The waiter's row a key holds.
    fn waiter_row(&self, name: &str, kv: &Kv, queued: Option<&str>) -> WaiterRow {
        let v = kv.json();
        let token = text(&v, "token").unwrap_or_default();
        WaiterRow {
            name: name.to_owned(),
            ticket: kv.create,
            queued: queued == Some(token.as_str()),
            token,
            host: text(&v, "host"),
            pid: uint(&v, "pid"),
            uid: uint(&v, "uid"),
            cmd: text(&v, "cmd"),
            since: v["since"].as_f64().filter(|s| s.is_finite()).unwrap_or(0.0),
            left_ms: v["ttl_ms"].as_i64().unwrap_or(1).max(1),
        }
    }

    /// The waiter of `name` whose ticket is `ticket`.
    fn waiter_of(&self, name: &str, ticket: i64) -> Result<Option<Kv>, StoreError> {
        let line = self.key(&format!("wait/{name}/"));
        let t = self.read(vec![scan(&line, MAX_WAITERS * 10)])?;
        Ok(t.reads.into_iter().flatten().find(|kv| kv.create == ticket))
    }

    /// One try at a take (see [`LeaseStore::take`]): `None` when what was
    /// read changed before the write (try again).
    fn try_take(
        &self,
        name: &str,
        slot: Slot,
        who: &Claimant<'_>,
        lease: Duration,
        ticket: Option<i64>,
    ) -> Result<Option<Claimed>, StoreError> {
        let mine = self.key(&format!("lease/{}", slot_row(name, slot.k)));
        let lock = self.key(&format!("lease/{name}"));
        let lock_end = b64(format!("{lock}$").as_bytes());
        let line = self.key(&format!("wait/{name}/"));
        let seat = self.key(&format!("queue/{name}"));
        let now = self.read(vec![
            range(&lock, lock_end.clone(), 10_000, false),
            scan(&line, 10_000),
            get(&seat),
        ])?;
        let [rows, waiters, seat_kv]: [Vec<Kv>; 3] = now
            .reads
            .try_into()
            .map_err(|_| self.odd("read", &Value::Null))?;
        let own = rows.iter().find(|r| r.key == mine);
        if let Some(own) = own {
            // A take whose answer was lost and is tried again finds its
            // own key: it is ours.
            if text(&own.json(), "token").as_deref() == Some(who.token) {
                return Ok(Some(Claimed::Taken(own.create)));
            }
        }
        let differ = rows
            .iter()
            .map(|r| uint(&r.json(), "slots").unwrap_or(1).max(1))
            .find(|n| *n != slot.of);
        if let Some(held) = differ {
            return Ok(Some(Claimed::SlotsDiffer { held }));
        }
        if own.is_some() {
            return Ok(Some(Claimed::Held));
        }
        let ahead = waiters
            .iter()
            .filter(|w| ticket.is_none_or(|t| w.create < t))
            .count() as u64;
        if ahead > 0 {
            return Ok(Some(Claimed::Behind { ahead }));
        }
        let id = self.grant(ttl_of(lease))?;
        let value = Self::who_value(who, json!({"slots": slot.of}));
        let mut success = vec![put(&mine, &value, id)];
        if let Some(w) = ticket.and_then(|t| waiters.iter().find(|w| w.create == t)) {
            success.push(delete(&w.key));
            if seat_kv
                .first()
                .is_some_and(|s| s.value == who.token.as_bytes())
            {
                success.push(delete(&seat));
            }
        }
        let t = self.txn(
            vec![
                created(&mine, "EQUAL", 0),
                unchanged_since(&lock, lock_end, now.revision),
                unchanged_since(&line, prefix_end(&line), now.revision),
                unchanged_since(&seat, prefix_end(&seat), now.revision),
            ],
            success,
            vec![],
        );
        match t {
            Ok(t) if t.succeeded => Ok(Some(Claimed::Taken(t.revision))),
            Ok(_) => {
                self.revoke(id)?;
                Ok(None)
            }
            Err(e) => {
                // Whether it was done is unknown: the lease is left to run
                // out (a take tried again finds its key by its token).
                Err(e)
            }
        }
    }

    /// Drops the oldest events of `name` past [`MAX_EVENTS`].
    fn prune(&self, name: &str) -> Result<(), StoreError> {
        let events = self.key(&format!("event/{name}/"));
        let v = self.wire.call(
            "kv/range",
            &json!({"key": b64(events.as_bytes()), "range_end": prefix_end(&events),
                    "count_only": true}),
        )?;
        let over = usize::try_from(int(&v["count"]))
            .unwrap_or(0)
            .saturating_sub(MAX_EVENTS);
        if over == 0 {
            return Ok(());
        }
        let old = self.read(vec![scan(&events, over.min(100))])?;
        let deletes: Vec<Value> = old
            .reads
            .iter()
            .flatten()
            .map(|kv| delete(&kv.key))
            .collect();
        self.txn(vec![], deletes, vec![]).map(drop)
    }

    /// Connects now: one read, within `within`.
    fn ping(&self, within: Duration) -> Result<(), StoreError> {
        let t = self.wire.timeout.get();
        self.wire.timeout.set(within.max(t));
        let r = self.read(vec![get(&self.key("name/"))]);
        self.wire.timeout.set(t);
        r.map(drop)
    }
}

impl LeaseStore for EtcdStore {
    fn url(&self) -> &str {
        &self.wire.addr.display
    }

    fn scheme(&self) -> &'static str {
        "etcd"
    }

    fn line_setup(&self) -> LineSetup {
        LineSetup {
            what: "keys wait/ and queue/ under the store's prefix",
            how: "grant the jobs' role readwrite on the store's prefix\n".to_owned(),
        }
    }

    fn fresh(&self) -> Result<Box<dyn LeaseStore>, StoreError> {
        Ok(Box::new(EtcdStore {
            wire: self.wire.fresh(),
            renewing: std::cell::RefCell::new(None),
        }))
    }

    fn set_timeout(&self, timeout: Duration) {
        self.wire.timeout.set(timeout);
    }

    /// The key `P schedule/NAME`: its `spec`, its version the key's
    /// `mod_revision`.
    fn schedule_kept(&self, name: &str) -> Result<Option<super::KeptSchedule>, StoreError> {
        let key = self.key(&format!("schedule/{name}"));
        let t = self.read(vec![get(&key)])?;
        Ok(t.reads
            .into_iter()
            .flatten()
            .next()
            .map(|kv| super::KeptSchedule::new(text(&kv.json(), "spec"), kv.modified)))
    }

    /// One transaction: the key `P schedule/NAME` written (its spec kept
    /// when none is given) and the events put, only if the key's
    /// `mod_revision` is still `version` (absent for 0).
    fn record_schedule(
        &self,
        name: &str,
        version: i64,
        spec: Option<&str>,
        events: &[String],
    ) -> Result<bool, StoreError> {
        let key = self.key(&format!("schedule/{name}"));
        let spec = match spec {
            Some(s) => Some(s.to_owned()),
            None => match self.schedule_kept(name)? {
                Some(k) if k.version == version => k.spec,
                Some(_) => return Ok(false),
                None if version == 0 => None,
                None => return Ok(false),
            },
        };
        let compare = if version == 0 {
            created(&key, "EQUAL", 0)
        } else {
            json!({"target": "MOD", "key": b64(key.as_bytes()), "result": "EQUAL",
                   "mod_revision": version.to_string()})
        };
        let value = serde_json::to_vec(&json!({ "spec": spec })).unwrap_or_default();
        let mark = self.key(&format!("name/{name}"));
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let mut writes = vec![put(&key, &value, 0), put(&mark, b"", 0)];
        // One revision for all: their keys in the order of the lines.
        for (i, line) in events.iter().enumerate() {
            let id = format!(
                "{:016x}{:08x}",
                nanos.saturating_add(i as u64),
                random_u32()
            );
            let event_key = self.key(&format!("event/{name}/{id}"));
            writes.push(put(&event_key, line.trim_end().as_bytes(), 0));
        }
        let t = self.txn(vec![compare], writes, vec![])?;
        Ok(t.succeeded)
    }

    fn fresh_connected(&self, within: Duration) -> Result<Box<dyn LeaseStore>, StoreError> {
        let s = EtcdStore {
            wire: self.wire.fresh(),
            renewing: std::cell::RefCell::new(None),
        };
        s.ping(within)?;
        Ok(Box::new(s))
    }

    fn take(
        &self,
        name: &str,
        slot: Slot,
        who: &Claimant<'_>,
        lease: Duration,
        ticket: Option<i64>,
    ) -> Result<Claimed, StoreError> {
        for _ in 0..4 {
            if let Some(c) = self.try_take(name, slot, who, lease, ticket)? {
                return Ok(c);
            }
        }
        // Changed under every try: others are at it; this one is not in.
        Ok(Claimed::Held)
    }

    fn renew(&self, name: &str, epoch: i64, _lease: Duration) -> Result<Renewed, StoreError> {
        let key = self.key(&format!("lease/{name}"));
        let stop = self.key(&format!("stop/{name}"));
        let cached = self
            .renewing
            .borrow()
            .as_ref()
            .filter(|(n, e, _)| n == name && *e == epoch)
            .map(|(_, _, id)| *id);
        let id = match cached {
            Some(id) => id,
            None => {
                let t = self.read(vec![get(&key)])?;
                match t.reads.into_iter().flatten().find(|kv| kv.create == epoch) {
                    Some(kv) => kv.lease,
                    None => return Ok(Renewed::Lost),
                }
            }
        };
        *self.renewing.borrow_mut() = Some((name.to_owned(), epoch, id));
        if !self.keep_alive(id)? {
            return Ok(Renewed::Lost);
        }
        // After the keep-alive, which may have waited: the key must still
        // be this take's, on this lease.
        let t = self.read(vec![get(&key), get(&stop)])?;
        let held = t.reads[0]
            .first()
            .is_some_and(|kv| kv.create == epoch && kv.lease == id);
        if !held {
            return Ok(Renewed::Lost);
        }
        let stop = t.reads[1]
            .first()
            .is_some_and(|kv| kv.value == epoch.to_string().as_bytes());
        Ok(Renewed::Held { stop })
    }

    fn release(&self, name: &str, epoch: i64) -> Result<bool, StoreError> {
        let key = self.key(&format!("lease/{name}"));
        let stop = self.key(&format!("stop/{name}"));
        let t = self.read(vec![get(&key)])?;
        let Some(kv) = t.reads.into_iter().flatten().find(|kv| kv.create == epoch) else {
            return Ok(false);
        };
        let t = self.txn(
            vec![created(&key, "EQUAL", epoch)],
            vec![delete(&key), delete(&stop)],
            vec![],
        )?;
        if t.succeeded {
            // The key is gone: the lock is free. Its etcd lease, which
            // holds nothing now, runs out by itself if it cannot be
            // revoked.
            let _ = self.revoke(kv.lease);
        }
        Ok(t.succeeded)
    }

    fn inspect(&self, name: &str) -> Result<Option<LeaseRow>, StoreError> {
        let t = self.read(vec![
            get(&self.key(&format!("lease/{name}"))),
            get(&self.key(&format!("stop/{name}"))),
        ])?;
        match t.reads[0].first() {
            Some(kv) => Ok(Some(self.lease_row(kv, t.reads[1].first())?)),
            None => Ok(None),
        }
    }

    fn inspect_slots(&self, name: &str) -> Result<Vec<LeaseRow>, StoreError> {
        let lock = self.key(&format!("lease/{name}"));
        let stops = self.key(&format!("stop/{name}"));
        let t = self.read(vec![
            range(&lock, b64(format!("{lock}$").as_bytes()), 10_000, false),
            range(&stops, b64(format!("{stops}$").as_bytes()), 10_000, false),
        ])?;
        self.rows(&t.reads[0], &t.reads[1])
    }

    fn list(&self) -> Result<Vec<LeaseRow>, StoreError> {
        let t = self.read(vec![
            scan(&self.key("lease/"), MAX_NAMES),
            scan(&self.key("stop/"), MAX_NAMES),
        ])?;
        self.rows(&t.reads[0], &t.reads[1])
    }

    fn request_stop(&self, name: &str) -> Result<Option<i64>, StoreError> {
        let key = self.key(&format!("lease/{name}"));
        let stop = self.key(&format!("stop/{name}"));
        let t = self.read(vec![get(&key)])?;
        let Some(kv) = t.reads.into_iter().flatten().next() else {
            return Ok(None);
        };
        let t = self.txn(
            vec![created(&key, "EQUAL", kv.create)],
            vec![put(&stop, kv.create.to_string().as_bytes(), kv.lease)],
            vec![],
        )?;
        Ok(t.succeeded.then_some(kv.create))
    }

    fn append_event(&self, name: &str, line: &str) -> Result<(), StoreError> {
        let mark = self.key(&format!("name/{name}"));
        let id = format!(
            "{:016x}{:08x}",
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64),
            random_u32()
        );
        let event = put(&self.key(&format!("event/{name}/{id}")), line.as_bytes(), 0);
        let t = self.txn(
            vec![created(&mark, "EQUAL", 0)],
            vec![put(&mark, b"", 0), event.clone()],
            vec![event],
        )?;
        // One look at the count every 16 revisions of the cluster's, so
        // about one append in 16 of every host's: a lock keeps at most
        // MAX_EVENTS and a few more.
        if t.revision % 16 == 0 {
            self.prune(name)?;
        }
        Ok(())
    }

    fn events(&self, name: &str) -> Result<Vec<String>, StoreError> {
        let events = self.key(&format!("event/{name}/"));
        let t = self.read(vec![range(&events, prefix_end(&events), MAX_EVENTS, true)])?;
        let mut lines: Vec<String> = t
            .reads
            .into_iter()
            .flatten()
            .map(|kv| {
                let mut v = kv.value;
                v.truncate(crate::journal::MAX_LINE);
                String::from_utf8_lossy(&v).into_owned()
            })
            .collect();
        lines.reverse();
        Ok(lines)
    }

    fn names(&self) -> Result<Vec<String>, StoreError> {
        let marks = self.key("name/");
        let leases = self.key("lease/");
        let t = self.read(vec![scan(&marks, MAX_NAMES), scan(&leases, MAX_NAMES)])?;
        let mut names: Vec<String> = t
            .reads
            .iter()
            .flatten()
            .filter_map(|kv| {
                let row = kv
                    .key
                    .strip_prefix(&marks)
                    .or_else(|| kv.key.strip_prefix(&leases))?;
                Some(lock_of_row(row).0.to_owned())
            })
            .filter(|n| crate::names::check_name(n).is_ok())
            .collect();
        names.sort();
        names.dedup();
        names.truncate(MAX_NAMES);
        Ok(names)
    }

    fn has_line(&self) -> Result<bool, StoreError> {
        Ok(true)
    }

    fn missing_index(&self) -> Result<Option<LineSetup>, StoreError> {
        Ok(None)
    }

    fn join_line(&self, name: &str, who: &Claimant<'_>, ttl: Duration) -> Result<i64, StoreError> {
        let key = self.key(&format!("wait/{name}/{}", who.token));
        let id = self.grant(ttl_of(ttl))?;
        let value = Self::who_value(who, json!({"ttl_ms": ttl.as_millis() as u64}));
        let t = self.txn(vec![], vec![put(&key, &value, id), get(&key)], vec![])?;
        t.reads
            .get(1)
            .and_then(|r| r.first())
            .map(|kv| kv.create)
            .ok_or_else(|| self.odd("join", &Value::Null))
    }

    fn take_queue_seat(
        &self,
        name: &str,
        who: &Claimant<'_>,
        ttl: Duration,
        replacing: Option<&str>,
    ) -> Result<Option<i64>, StoreError> {
        let seat = self.key(&format!("queue/{name}"));
        let key = self.key(&format!("wait/{name}/{}", who.token));
        let now = self.read(vec![get(&seat)])?;
        let held = now.reads.into_iter().flatten().next();
        let mut compare = vec![created(&seat, "EQUAL", 0)];
        let mut success = vec![];
        if let Some(kv) = &held {
            let theirs = String::from_utf8_lossy(&kv.value).into_owned();
            if replacing != Some(theirs.as_str()) {
                return Ok(None);
            }
            compare = vec![created(&seat, "EQUAL", kv.create)];
            compare.push(json!({"target": "MOD", "key": b64(seat.as_bytes()),
                                "result": "EQUAL", "mod_revision": kv.modified.to_string()}));
            success.push(delete(&self.key(&format!("wait/{name}/{theirs}"))));
        }
        let id = self.grant(ttl_of(ttl))?;
        let value = Self::who_value(who, json!({"ttl_ms": ttl.as_millis() as u64}));
        success.push(put(&key, &value, id));
        success.push(put(&seat, who.token.as_bytes(), id));
        success.push(get(&key));
        let t = self.txn(compare, success, vec![])?;
        if !t.succeeded {
            self.revoke(id)?;
            return Ok(None);
        }
        Ok(t.reads.last().and_then(|r| r.first()).map(|kv| kv.create))
    }

    fn stay_in_line(&self, name: &str, ticket: i64, _ttl: Duration) -> Result<bool, StoreError> {
        match self.waiter_of(name, ticket)? {
            Some(kv) => self.keep_alive(kv.lease),
            None => Ok(false),
        }
    }

    fn leave_line(&self, name: &str, ticket: i64) -> Result<(), StoreError> {
        match self.waiter_of(name, ticket)? {
            Some(kv) => self.revoke(kv.lease),
            None => Ok(()),
        }
    }

    fn queued(&self, name: &str) -> Result<Option<WaiterRow>, StoreError> {
        let seat = self.key(&format!("queue/{name}"));
        let line = self.key(&format!("wait/{name}/"));
        let t = self.read(vec![get(&seat), scan(&line, MAX_WAITERS * 10)])?;
        let Some(token) = t.reads[0]
            .first()
            .map(|kv| String::from_utf8_lossy(&kv.value).into_owned())
        else {
            return Ok(None);
        };
        let mine = format!("{line}{token}");
        Ok(t.reads[1]
            .iter()
            .find(|kv| kv.key == mine)
            .map(|kv| self.waiter_row(name, kv, Some(&token))))
    }

    fn waiters(&self, name: &str) -> Result<Vec<WaiterRow>, StoreError> {
        let seat = self.key(&format!("queue/{name}"));
        let line = self.key(&format!("wait/{name}/"));
        let t = self.read(vec![get(&seat), scan(&line, MAX_WAITERS)])?;
        let token = t.reads[0]
            .first()
            .map(|kv| String::from_utf8_lossy(&kv.value).into_owned());
        Ok(t.reads[1]
            .iter()
            .map(|kv| self.waiter_row(name, kv, token.as_deref()))
            .collect())
    }
}

impl EtcdStore {
    /// The lease rows of `leases`, a lock's slots in order after it, each
    /// with its stop request from `stops`.
    fn rows(&self, leases: &[Kv], stops: &[Kv]) -> Result<Vec<LeaseRow>, StoreError> {
        let lease_p = self.key("lease/");
        let stop_p = self.key("stop/");
        let mut rows = Vec::new();
        for kv in leases {
            let row = kv.key.strip_prefix(&lease_p).unwrap_or(&kv.key);
            let stop = stops
                .iter()
                .find(|s| s.key.strip_prefix(&stop_p) == Some(row));
            match self.lease_row(kv, stop) {
                Ok(r) if r.left_ms > 0 => rows.push(r),
                Ok(_) => {}
                Err(StoreError::BadRow { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        rows.sort_by(|a, b| (&a.name, a.slot).cmp(&(&b.name, b.slot)));
        Ok(rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_ends_where_its_keys_do() {
        assert_eq!(unb64(&prefix_end("a/")).unwrap(), b"a0");
        assert_eq!(unb64(&prefix_end("ab")).unwrap(), b"ac");
    }

    #[test]
    fn a_lease_rounds_up_to_whole_seconds() {
        assert_eq!(ttl_of(Duration::from_millis(500)), 1);
        assert_eq!(ttl_of(Duration::from_millis(1000)), 1);
        assert_eq!(ttl_of(Duration::from_millis(1001)), 2);
        assert_eq!(ttl_of(Duration::from_secs(30)), 30);
    }

    #[test]
    fn a_value_is_read_as_input() {
        let kv = |value: &[u8]| Kv {
            key: "onlyone/lease/x".into(),
            value: value.to_vec(),
            create: 5,
            modified: 5,
            lease: 1,
        };
        assert_eq!(kv(b"not json").json(), Value::Null);
        assert_eq!(kv(b"[1]").json(), Value::Null);
        let long = format!("{{\"cmd\":\"{}\"}}", "é".repeat(5000));
        let cut = text(&kv(long.as_bytes()).json(), "cmd").unwrap();
        assert!(cut.len() <= MAX_TEXT && cut.chars().all(|c| c == 'é'));
        assert_eq!(uint(&json!({"pid": -1}), "pid"), None);
        assert_eq!(uint(&json!({"pid": 1u64 << 40}), "pid"), None);
    }
}
