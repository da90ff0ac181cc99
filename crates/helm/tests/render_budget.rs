//! The render memory budget, measured where it matters: the peak resident memory of a process
//! rendering issue 30's bomb (a string doubled forty times in a variable), which grew past
//! 3 GiB before the budget. A test binary of its own, so its peak is this render's (nextest
//! runs each test in its own process).

use berth_helm::ReleaseInfo;
use berth_helm::render::{self, Budget, Capabilities, RenderError};

const BOMB: &str =
    r#"{{ $s := repeat 1048576 "x" }}{{ range until 40 }}{{ $s = printf "%s%s" $s $s }}{{ end }}"#;

fn peak_rss_mib() -> f64 {
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF)
        .expect("getrusage");
    usage.max_rss() as f64 / 1024.0
}

#[test]
fn the_variable_doubling_bomb_is_refused_within_its_memory_budget() {
    let files = vec![
        (
            "Chart.yaml".to_string(),
            b"apiVersion: v2\nname: bomb\nversion: 0.1.0\n".to_vec(),
        ),
        ("templates/bomb.yaml".to_string(), BOMB.as_bytes().to_vec()),
    ];
    let release = ReleaseInfo {
        name: "bomb".into(),
        namespace: "default".into(),
        revision: 1,
        is_install: true,
        is_upgrade: false,
    };
    let before = peak_rss_mib();
    let budget = Budget {
        memory: Some(render::DEFAULT_MEMORY_BUDGET),
        ..Default::default()
    };
    let started = std::time::Instant::now();
    let (rendered, charged) = render::measured(budget, || {
        render::render_release(
            &files,
            &serde_json::json!({}),
            &release,
            &Capabilities::default(),
        )
    });
    let took = started.elapsed();
    let after = peak_rss_mib();
    match rendered {
        Err(RenderError::Limit { template, message }) => {
            assert_eq!(template, "bomb/templates/bomb.yaml");
            assert_eq!(
                message,
                "render: memory budget of 256 MiB exceeded building a string in template bomb/templates/bomb.yaml"
            );
        }
        other => panic!("expected the memory budget's refusal, got {other:?}"),
    }
    println!(
        "refused after {took:?}, {:.0} MiB charged; peak RSS {before:.0} MiB before, {after:.0} MiB after",
        charged as f64 / 1048576.0
    );
    // The budget counts what the render holds; the process's peak adds the copy a result
    // makes while it becomes a value, and the allocator's slack: well under 1 GiB, where the
    // bomb asked for 2^40 MiB.
    assert!(
        after < before + 1024.0,
        "peak RSS grew from {before:.0} MiB to {after:.0} MiB"
    );
}
