//! A hostile chart's render is bounded: endless include/tpl recursion stops at the engine's depth
//! limit, a render past the time limit, over the output limit or over the memory budget is
//! refused with an error naming the limit (ResourceExhausted: the same chart hits it again),
//! nothing is applied, and the service keeps answering.

mod support;

use std::time::{Duration, Instant};

use berth_proto::release::InstallRequest;
use berth_release::manager::RenderLimits;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use support::{chart, config_map, start, start_with_render_limits};

fn install(
    h: &support::Harness,
    name: &str,
    files: Vec<berth_proto::release::ChartFile>,
    values: &str,
) -> InstallRequest {
    InstallRequest {
        name: name.into(),
        namespace: h.namespace.clone(),
        files,
        values: (!values.is_empty()).then(|| {
            berth_proto::json::to_struct(
                &serde_json::from_str(values).expect("test values are JSON"),
            )
        }),
        package: String::new(),
        wait_ms: 0,
    }
}

/// Installs `files` expecting InvalidArgument; returns the message.
async fn refused(
    h: &mut support::Harness,
    name: &str,
    files: Vec<berth_proto::release::ChartFile>,
    values: &str,
) -> anyhow::Result<String> {
    refused_with(h, name, files, values, tonic::Code::InvalidArgument).await
}

/// Installs `files` expecting a render limit's refusal (ResourceExhausted); returns the
/// message.
async fn limited(
    h: &mut support::Harness,
    name: &str,
    files: Vec<berth_proto::release::ChartFile>,
    values: &str,
) -> anyhow::Result<String> {
    refused_with(h, name, files, values, tonic::Code::ResourceExhausted).await
}

async fn refused_with(
    h: &mut support::Harness,
    name: &str,
    files: Vec<berth_proto::release::ChartFile>,
    values: &str,
    code: tonic::Code,
) -> anyhow::Result<String> {
    let err = match h.grpc.install(install(h, name, files, values)).await {
        Ok(r) => anyhow::bail!("expected a refusal, got {:?}", r.into_inner()),
        Err(e) => e,
    };
    assert_eq!(err.code(), code, "{err}");
    Ok(err.message().to_owned())
}

/// The service still installs a sane chart after a refusal.
async fn still_serving(h: &mut support::Harness) -> anyhow::Result<()> {
    let ok = chart(&[("templates/ok.yaml", &config_map("after", false))]);
    h.grpc.install(install(h, "after", ok, "")).await?;
    let cms = Api::<ConfigMap>::namespaced(h.kube.clone(), &h.namespace);
    assert!(cms.get_opt("after").await?.is_some());
    Ok(())
}

#[tokio::test]
async fn endless_include_and_tpl_stop_at_the_depth_limit() -> anyhow::Result<()> {
    let mut h = start().await?;
    let include = chart(&[
        (
            "templates/_loop.tpl",
            "{{- define \"loop\" }}{{ include \"loop\" . }}{{ end }}",
        ),
        ("templates/a.yaml", &config_map("small", false)),
        ("templates/b.yaml", "x: {{ include \"loop\" . }}\n"),
    ]);
    let message = refused(&mut h, "include", include, "").await?;
    assert!(message.contains("nesting deeper than"), "{message}");
    let tpl = chart(&[
        ("templates/a.yaml", &config_map("small", false)),
        ("templates/b.yaml", "x: {{ tpl .Values.t . }}\n"),
    ]);
    let message = refused(&mut h, "tpl", tpl, r#"{"t": "{{ tpl .Values.t . }}"}"#).await?;
    assert!(message.contains("nesting deeper than"), "{message}");
    let cms = Api::<ConfigMap>::namespaced(h.kube.clone(), &h.namespace);
    assert!(cms.get_opt("small").await?.is_none(), "nothing applied");
    still_serving(&mut h).await
}

#[tokio::test]
async fn a_render_past_the_time_limit_is_refused() -> anyhow::Result<()> {
    let mut h = start_with_render_limits(RenderLimits {
        time: Duration::from_millis(300),
        ..Default::default()
    })
    .await?;
    // Ten million iterations of nested ranges: seconds of work, far past 300 ms.
    let slow = chart(&[
        ("templates/a.yaml", &config_map("small", false)),
        (
            "templates/b.yaml",
            "# {{ range until 100000 }}{{ range until 100 }}{{ end }}{{ end }}\n",
        ),
    ]);
    let started = Instant::now();
    let message = limited(&mut h, "slow", slow, "").await?;
    assert!(message.contains("render time limit of 300ms"), "{message}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let cms = Api::<ConfigMap>::namespaced(h.kube.clone(), &h.namespace);
    assert!(cms.get_opt("small").await?.is_none(), "nothing applied");
    still_serving(&mut h).await
}

#[tokio::test]
async fn renders_past_the_time_limit_stop_and_give_their_slot_back() -> anyhow::Result<()> {
    let mut h = start_with_render_limits(RenderLimits {
        time: Duration::from_secs(2),
        ..Default::default()
    })
    .await?;
    // Endless renders (10^15 steps), one more than the service renders at once: were they left
    // running past their deadline, they would hold every render slot for good.
    let endless = chart(&[(
        "templates/b.yaml",
        "# {{ range 100000 }}{{ range 100000 }}{{ range 100000 }}{{ end }}{{ end }}{{ end }}\n",
    )]);
    let slots = std::thread::available_parallelism().map_or(2, |n| n.get().max(2));
    let mut calls = Vec::new();
    for i in 0..=slots {
        let mut grpc = h.grpc.clone();
        let request = install(&h, &format!("endless-{i}"), endless.clone(), "");
        calls.push(tokio::spawn(async move { grpc.install(request).await }));
    }
    for call in calls {
        let err = call.await?.expect_err("an endless render is refused");
        assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err}");
        assert!(err.message().contains("render time limit of 2s"), "{err}");
    }
    // The slots are free again: a sane chart installs within its own time limit.
    still_serving(&mut h).await
}

#[tokio::test]
async fn a_render_over_the_output_limit_is_refused() -> anyhow::Result<()> {
    let mut h = start_with_render_limits(RenderLimits {
        output_bytes: 64 * 1024,
        ..Default::default()
    })
    .await?;
    let big = chart(&[
        ("templates/a.yaml", &config_map("small", false)),
        (
            "templates/b.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: big\ndata:\n  x: {{ repeat 100000 \"x\" }}\n",
        ),
    ]);
    let message = limited(&mut h, "big", big, "").await?;
    assert!(
        message.contains("over the render output limit of 65536 bytes"),
        "{message}"
    );
    let cms = Api::<ConfigMap>::namespaced(h.kube.clone(), &h.namespace);
    assert!(cms.get_opt("small").await?.is_none(), "nothing applied");
    still_serving(&mut h).await
}

/// issue 30's bomb, a string doubled forty times in a variable: refused at the memory budget,
/// naming it and the template, in well under the time limit; nothing applied.
#[tokio::test]
async fn a_render_over_the_memory_budget_is_refused() -> anyhow::Result<()> {
    let mut h = start_with_render_limits(RenderLimits {
        memory_bytes: 64 << 20,
        ..Default::default()
    })
    .await?;
    let bomb = chart(&[
        ("templates/a.yaml", &config_map("small", false)),
        (
            "templates/b.yaml",
            r#"{{ $s := repeat 1048576 "x" }}{{ range until 40 }}{{ $s = printf "%s%s" $s $s }}{{ end }}"#,
        ),
    ]);
    let message = limited(&mut h, "bomb", bomb, "").await?;
    assert!(
        message.contains("render: memory budget of 64 MiB exceeded building a string in template hello/templates/b.yaml"),
        "{message}"
    );
    let cms = Api::<ConfigMap>::namespaced(h.kube.clone(), &h.namespace);
    assert!(cms.get_opt("small").await?.is_none(), "nothing applied");
    still_serving(&mut h).await
}
