//! `limits:` of `package.yaml`: what one run of the package's hooks may use. Each hook process
//! (a run, a config query, a settings check) gets these as its cgroup's limits (see
//! docs/decisions/hook-identity.md); a worker may cap them lower.
//!
//! ```yaml
//! limits:
//!   processes: 64     # tasks, threads included
//!   memory: 256Mi     # bytes, or a Kubernetes quantity (Ki, Mi, Gi, Ti, k, M, G, T)
//!   cpu: 500m         # CPUs, or thousandths of one (m)
//! ```

use serde_json::Value;

use crate::definition::DefinitionError;

/// What one hook run of the package may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HookLimits {
    /// Processes (tasks, threads included) at once.
    pub processes: u32,
    /// Memory in bytes, page cache and tmpfs files of the run included.
    pub memory_bytes: u64,
    /// Thousandths of a CPU.
    pub cpu_millis: u32,
}

impl Default for HookLimits {
    /// 256 processes, 512 MiB, 1 CPU.
    fn default() -> Self {
        HookLimits {
            processes: 256,
            memory_bytes: 512 << 20,
            cpu_millis: 1000,
        }
    }
}

/// Bounds of what a package may declare (a worker's caps may be lower).
pub const MIN_HOOK_MEMORY: u64 = 4 << 20;
pub const MAX_HOOK_MEMORY: u64 = 1 << 40;
pub const MAX_HOOK_PROCESSES: u32 = 1 << 20;
/// 10m: the kernel's smallest CPU quota (1 ms per 100 ms period).
pub const MIN_HOOK_CPU_MILLIS: u32 = 10;
pub const MAX_HOOK_CPU_MILLIS: u32 = 1024 * 1000;

impl HookLimits {
    /// Parses the `limits` mapping; a field left out keeps its default.
    pub fn parse(value: &Value) -> Result<HookLimits, DefinitionError> {
        let map = value
            .as_object()
            .ok_or_else(|| DefinitionError::new("limits", "must be a mapping"))?;
        let mut limits = HookLimits::default();
        for (key, v) in map {
            let field = format!("limits.{key}");
            let text = match v {
                Value::String(s) => s.trim().to_owned(),
                Value::Number(n) => n.to_string(),
                other => {
                    return Err(DefinitionError::new(
                        field,
                        format!("must be a number or a quantity, got {other}"),
                    ));
                }
            };
            let bad = |message: String| DefinitionError::new(field.clone(), message);
            match key.as_str() {
                "processes" => {
                    let n: u32 = text
                        .parse()
                        .map_err(|_| bad(format!("{text:?} is not a whole number of processes")))?;
                    if !(1..=MAX_HOOK_PROCESSES).contains(&n) {
                        return Err(bad(format!(
                            "{n} is out of range (1 to {MAX_HOOK_PROCESSES})"
                        )));
                    }
                    limits.processes = n;
                }
                "memory" => {
                    let bytes = parse_memory(&text).map_err(bad)?;
                    if !(MIN_HOOK_MEMORY..=MAX_HOOK_MEMORY).contains(&bytes) {
                        return Err(bad(format!("{text} is out of range (4Mi to 1Ti)")));
                    }
                    limits.memory_bytes = bytes;
                }
                "cpu" => {
                    let millis = parse_cpu(&text).map_err(bad)?;
                    if !(MIN_HOOK_CPU_MILLIS..=MAX_HOOK_CPU_MILLIS).contains(&millis) {
                        return Err(bad(format!("{text} is out of range (10m to 1024)")));
                    }
                    limits.cpu_millis = millis;
                }
                _ => {
                    return Err(bad(
                        "unknown limit; expected processes, memory or cpu".into()
                    ));
                }
            }
        }
        Ok(limits)
    }
}

/// A decimal number with an optional fraction, times `scale`, rounded down: `1.5` × 1024.
fn scaled(number: &str, scale: u128) -> Option<u128> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() {
        return None;
    }
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || !digits(fraction) || fraction.len() > 9 {
        return None;
    }
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let fraction_value: u128 = if fraction.is_empty() {
        0
    } else {
        fraction.parse().ok()?
    };
    let denominator = 10u128.pow(fraction.len() as u32);
    whole
        .checked_mul(scale)?
        .checked_add(fraction_value.checked_mul(scale)? / denominator)
}

/// Bytes from a Kubernetes memory quantity: `536870912`, `512Mi`, `1.5Gi`, `500M`.
pub fn parse_memory(text: &str) -> Result<u64, String> {
    const SUFFIXES: [(&str, u128); 8] = [
        ("Ki", 1 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
        ("k", 1_000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
        ("T", 1_000_000_000_000),
    ];
    let (number, scale) = SUFFIXES
        .iter()
        .find_map(|(s, scale)| text.strip_suffix(s).map(|n| (n, *scale)))
        .unwrap_or((text, 1));
    scaled(number, scale)
        .and_then(|b| u64::try_from(b).ok())
        .ok_or_else(|| {
            format!(
                "{text:?} is not an amount of memory (bytes, or a quantity such as 512Mi or 2Gi)"
            )
        })
}

/// Thousandths of a CPU from a Kubernetes CPU quantity: `500m`, `1`, `0.25`.
pub fn parse_cpu(text: &str) -> Result<u32, String> {
    let millis = match text.strip_suffix('m') {
        Some(n) if !n.contains('.') => scaled(n, 1),
        Some(_) => None,
        None => scaled(text, 1000),
    };
    millis
        .and_then(|m| u32::try_from(m).ok())
        .ok_or_else(|| format!("{text:?} is not an amount of CPU (such as 500m, 1 or 0.5)"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn quantities_read_as_kubernetes_writes_them() {
        assert_eq!(parse_memory("512Mi"), Ok(512 << 20));
        assert_eq!(parse_memory("1.5Gi"), Ok(3 << 29));
        assert_eq!(parse_memory("500M"), Ok(500_000_000));
        assert_eq!(parse_memory("4096"), Ok(4096));
        assert!(parse_memory("lots").is_err());
        assert!(parse_memory("12Qi").is_err());
        assert!(parse_memory("").is_err());
        assert_eq!(parse_cpu("500m"), Ok(500));
        assert_eq!(parse_cpu("2"), Ok(2000));
        assert_eq!(parse_cpu("0.25"), Ok(250));
        assert!(parse_cpu("1.5m").is_err());
        assert!(parse_cpu("fast").is_err());
    }

    #[test]
    fn limits_keep_defaults_for_what_is_left_out_and_name_what_is_wrong() {
        assert_eq!(
            HookLimits::parse(&json!({"processes": 64, "memory": "256Mi"})).unwrap(),
            HookLimits {
                processes: 64,
                memory_bytes: 256 << 20,
                cpu_millis: 1000
            }
        );
        assert_eq!(
            HookLimits::parse(&json!({"cpu": 0.5})).unwrap().cpu_millis,
            500
        );
        let field = |v: serde_json::Value| HookLimits::parse(&v).unwrap_err().field;
        assert_eq!(field(json!({"memory": "1Mi"})), "limits.memory");
        assert_eq!(field(json!({"memory": "lots"})), "limits.memory");
        assert_eq!(field(json!({"processes": 0})), "limits.processes");
        assert_eq!(field(json!({"processes": "many"})), "limits.processes");
        assert_eq!(field(json!({"cpu": "1m"})), "limits.cpu");
        assert_eq!(field(json!({"disk": "1Gi"})), "limits.disk");
        assert_eq!(field(json!({"cpu": [1]})), "limits.cpu");
        assert_eq!(field(json!(["processes"])), "limits");
    }
}
