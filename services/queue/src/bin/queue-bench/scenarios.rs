//! The in-process scenarios: no-op throughput, enqueue→start latency, supersede→cancel.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use berth_proto::queue as pb;

use crate::Args;
use crate::harness::{BenchHandler, Broker, Probe, Workers, task, unix_micros};

/// Tasks per Enqueue call of the throughput producer.
const BATCH: usize = 100;

/// Tasks/s from the first Enqueue to the broker holding no task, with `workers` runtimes
/// leasing while the producer enqueues.
pub async fn throughput(args: &Args, database: &str, workers: usize) -> anyhow::Result<f64> {
    let broker = Broker::start(database).await?;
    let (probe, _events) = Probe::new();
    let pool = Workers::start(
        &broker,
        Arc::new(BenchHandler(probe.clone())),
        workers,
        args.concurrency,
    )?;
    let run = uuid::Uuid::new_v4();
    let tasks: Vec<pb::Task> = (0..args.tasks)
        .map(|i| {
            task(
                format!("{run}-{i}"),
                i % args.queues.max(1),
                "bench",
                "NoOp",
                "{}".into(),
            )
        })
        .collect();
    let mut producer = broker.client()?;
    let started = Instant::now();
    for chunk in tasks.chunks(BATCH) {
        producer
            .enqueue(pb::EnqueueRequest {
                tasks: chunk.to_vec(),
            })
            .await
            .context("enqueue")?;
    }
    let deadline = started + args.timeout();
    while probe.noops.load(Ordering::Relaxed) < args.tasks as u64 {
        anyhow::ensure!(
            Instant::now() < deadline,
            "not done after {:?}",
            args.timeout()
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    broker.drained(args.timeout()).await?;
    let took = started.elapsed();
    pool.stop().await?;
    broker.stop().await?;
    Ok(args.tasks as f64 / took.as_secs_f64().max(1e-9))
}

/// Percentiles of a set of durations.
pub struct Percentiles {
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
    pub samples: usize,
}

impl Percentiles {
    fn of(mut micros: Vec<u64>) -> Percentiles {
        micros.sort_unstable();
        let at = |q: f64| {
            let i = ((micros.len() as f64 - 1.0) * q).round() as usize;
            Duration::from_micros(micros.get(i).copied().unwrap_or(0))
        };
        Percentiles {
            p50: at(0.5),
            p99: at(0.99),
            max: at(1.0),
            samples: micros.len(),
        }
    }
}

impl fmt::Display for Percentiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms (n={})",
            self.p50.as_secs_f64() * 1e3,
            self.p99.as_secs_f64() * 1e3,
            self.max.as_secs_f64() * 1e3,
            self.samples
        )
    }
}

/// Enqueue→start latency with tasks produced at a steady `rate` per second for
/// `args.latency_secs`, in small batches every 10 ms (as a relay under load would send them).
///
/// The first `args.warmup_secs` run at the same rate untimed: a broker that has just started
/// opens its pooled connections and prepares its statements on them while the load ramps up,
/// and that start-up (tens of milliseconds per connection on PostgreSQL) is not the steady
/// state a long-running broker is in.
pub async fn latency(
    args: &Args,
    database: &str,
    workers: usize,
    rate: f64,
) -> anyhow::Result<Percentiles> {
    let broker = Broker::start(database).await?;
    let (probe, _events) = Probe::new();
    let pool = Workers::start(
        &broker,
        Arc::new(BenchHandler(probe.clone())),
        workers,
        args.concurrency,
    )?;
    let run = uuid::Uuid::new_v4();
    let mut producer = broker.client()?;
    let tick = Duration::from_millis(10);
    let mut ticker = tokio::time::interval(tick);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let started = Instant::now();
    let warmup = Duration::from_secs(args.warmup_secs);
    let (mut owed, mut sent, mut timed) = (0.0f64, 0usize, 0usize);
    let mut calls = Vec::new();
    while started.elapsed() < warmup + Duration::from_secs(args.latency_secs) {
        ticker.tick().await;
        owed += rate * tick.as_secs_f64();
        let warming = started.elapsed() < warmup;
        let kind = if warming { "Warmup" } else { "Timed" };
        let now = unix_micros();
        let batch: Vec<pb::Task> = (0..owed.floor() as usize)
            .map(|k| {
                let i = sent + k;
                task(
                    format!("{run}-{i}"),
                    i % args.queues.max(1),
                    "bench",
                    kind,
                    format!(r#"{{"t":{now}}}"#),
                )
            })
            .collect();
        owed -= batch.len() as f64;
        sent += batch.len();
        let batch_len = batch.len();
        if !batch.is_empty() {
            let call = Instant::now();
            producer
                .enqueue(pb::EnqueueRequest { tasks: batch })
                .await
                .context("enqueue")?;
            if !warming {
                calls.push(call.elapsed().as_micros() as u64);
                timed += batch_len;
            }
        }
    }
    broker.drained(args.timeout()).await?;
    pool.stop().await?;
    broker.stop().await?;
    // Part of every latency: the Enqueue call itself (on PostgreSQL mostly its commit's WAL flush).
    eprintln!("  of which the Enqueue call: {}", Percentiles::of(calls));
    let latencies = std::mem::take(
        &mut *probe
            .latencies
            .lock()
            .map_err(|_| anyhow::anyhow!("poisoned"))?,
    );
    anyhow::ensure!(
        latencies.len() == timed,
        "{} of {timed} timed tasks ran",
        latencies.len()
    );
    Ok(Percentiles::of(latencies))
}

/// Time from Supersede (a newer generation) to the running task's handler seeing its
/// cancellation, over `args.cancel_rounds` rounds.
pub async fn cancellation(args: &Args, database: &str) -> anyhow::Result<Percentiles> {
    let broker = Broker::start(database).await?;
    let (probe, mut events) = Probe::new();
    let pool = Workers::start(&broker, Arc::new(BenchHandler(probe)), 1, args.concurrency)?;
    let mut client = broker.client()?;
    let run = uuid::Uuid::new_v4();
    let mut samples = Vec::new();
    for round in 0..args.cancel_rounds {
        let package = format!("cancel-{run}-{round}");
        let hold = task(
            format!("{package}-hold"),
            1_000_000 + round,
            &package,
            "Hold",
            "{}".into(),
        );
        client
            .enqueue(pb::EnqueueRequest { tasks: vec![hold] })
            .await
            .context("enqueue")?;
        tokio::time::timeout(args.timeout(), events.started.recv())
            .await
            .context("the Hold task did not start")?
            .context("the handler is gone")?;
        let superseded = Instant::now();
        client
            .supersede(pb::SupersedeRequest {
                package,
                generation: 2,
                keep_kinds: vec![],
            })
            .await
            .context("supersede")?;
        let seen = tokio::time::timeout(args.timeout(), events.cancelled.recv())
            .await
            .context("the Hold task was not cancelled")?
            .context("the handler is gone")?;
        samples.push(seen.duration_since(superseded).as_micros() as u64);
    }
    broker.drained(args.timeout()).await?;
    pool.stop().await?;
    broker.stop().await?;
    Ok(Percentiles::of(samples))
}
