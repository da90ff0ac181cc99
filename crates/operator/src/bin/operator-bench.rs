//! How fast an event reaches a target write through a two-source `@join`, and what the
//! engine's state costs in memory.
//!
//! `operator-bench [--objects N] [--events M]` (default 10,000 source objects, half
//! Services and half EndpointSlices, joined on name and namespace; 2,000 events): loads the
//! objects, then changes one EndpointSlice at a time and times each event from `on_event` to
//! the write it produces. Prints the load time, p50/p99/max per event and the resident memory
//! the engine grew by. Build with `--release` for figures worth quoting.

use std::time::{Duration, Instant};

use berth_operator::engine::{Engine, Event, Write};
use berth_operator::expr::Env;
use berth_operator::spec::Operator;
use serde_json::{Value, json};

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn service(i: usize) -> Value {
    json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": format!("svc-{i}"), "namespace": format!("ns-{}", i % 50),
            "annotations": {"dcontroller.io/endpointslice-controller-enabled": "true"}},
        "spec": {"type": "ClusterIP", "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}})
}

fn slice(i: usize, generation: usize) -> Value {
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("svc-{i}-abcde"), "namespace": format!("ns-{}", i % 50),
            "labels": {"kubernetes.io/service-name": format!("svc-{i}")}},
        "endpoints": [{"addresses": [format!("10.{}.{}.1", i / 250 % 250, i % 250),
                                     format!("fd00::{generation:x}")],
            "conditions": {"ready": true}}]})
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn main() {
    let objects = arg("--objects", 10_000).max(2);
    let events = arg("--events", 2_000).max(1);
    let spec = json!({"apiVersion": "dcontroller.io/v1alpha1", "kind": "Operator",
        "metadata": {"name": "bench"}, "spec": {"controllers": [{
            "name": "join",
            "sources": [{"apiGroup": "", "kind": "Service"},
                        {"apiGroup": "discovery.k8s.io", "kind": "EndpointSlice"}],
            "pipeline": [
                {"@join": {"@and": [
                    {"@eq": ["$.Service.metadata.name",
                             "$[\"EndpointSlice\"][\"metadata\"][\"labels\"][\"kubernetes.io/service-name\"]"]},
                    {"@eq": ["$.Service.metadata.namespace", "$.EndpointSlice.metadata.namespace"]}]}},
                {"@project": {
                    "metadata": {"name": "$.Service.metadata.name",
                                 "namespace": "$.Service.metadata.namespace"},
                    "spec": {"ports": "$.Service.spec.ports",
                             "addresses": {"@map": ["$$.addresses", "$.EndpointSlice.endpoints"]}}}}],
            "target": {"kind": "EndpointView"}}]}});
    let op = Operator::from_value(&spec).expect("the bench spec is valid");
    let controller = op.controllers[0].clone();
    let before = rss_kib();
    let mut engine = Engine::new(
        controller,
        "bench.view.dcontroller.io/v1alpha1".into(),
        "EndpointView".into(),
    );
    let pairs = objects / 2;
    let now = chrono::Utc::now();
    let start = Instant::now();
    let mut writes = 0usize;
    for i in 0..pairs {
        let env = Env::new(now);
        writes += engine
            .on_event(0, Event::Upsert(service(i)), &env)
            .writes
            .len();
        let env = Env::new(now);
        writes += engine
            .on_event(1, Event::Upsert(slice(i, 0)), &env)
            .writes
            .len();
    }
    let load = start.elapsed();
    let grown = rss_kib().saturating_sub(before);
    assert_eq!(engine.target().len(), pairs, "every pair joined");
    let mut times = Vec::with_capacity(events);
    for e in 0..events {
        let i = (e * 7919) % pairs;
        let env = Env::new(now);
        let t = Instant::now();
        let outcome = engine.on_event(1, Event::Upsert(slice(i, e + 1)), &env);
        let took = t.elapsed();
        assert!(
            matches!(outcome.writes.as_slice(), [Write::Upsert(_)]),
            "each change writes its view"
        );
        times.push(took);
    }
    times.sort();
    println!(
        "operator-bench: {objects} source objects ({pairs} Services, {pairs} EndpointSlices), two-source @join on name and namespace"
    );
    println!(
        "  load: {:.1} ms for {objects} objects ({writes} target writes)",
        load.as_secs_f64() * 1e3
    );
    println!(
        "  event -> target write over {events} EndpointSlice changes: p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        percentile(&times, 0.50).as_secs_f64() * 1e3,
        percentile(&times, 0.99).as_secs_f64() * 1e3,
        times.last().map_or(0.0, |d| d.as_secs_f64() * 1e3)
    );
    println!(
        "  memory: resident set grew {:.1} MiB holding {} objects, {} joined rows and {} views",
        grown as f64 / 1024.0,
        engine.cached(),
        pairs,
        engine.target().len()
    );
}
