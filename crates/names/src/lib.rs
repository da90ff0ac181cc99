//! Kubernetes name rules, written once for every crate that accepts a name that becomes a
//! Kubernetes object, release, queue or directory name (package names, instance names,
//! namespaces, release names). Each caller words its own error, naming its own field.
//!
//! Also berth's two identifiers that cross services: [`PackageKey`] and [`Generation`].

mod ids;

pub use ids::{Generation, PackageKey};

/// Longest DNS-1123 label.
pub const MAX_LABEL_LEN: usize = 63;

/// Whether `value` is a DNS-1123 label: 1–63 lowercase letters, digits or '-', starting and
/// ending with a letter or digit.
pub fn is_dns_label(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= MAX_LABEL_LEN
        && value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !value.starts_with('-')
        && !value.ends_with('-')
}

/// Whether `value` is a DNS-1123 subdomain of at most `max` characters: DNS labels joined by
/// '.'.
pub fn is_dns_subdomain(value: &str, max: usize) -> bool {
    value.len() <= max && value.split('.').all(is_dns_label)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels() {
        for ok in ["a", "hello", "my-app-2", "0", &"a".repeat(63)] {
            assert!(is_dns_label(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "Hello", "a_b", "a.b", "é", &"a".repeat(64)] {
            assert!(!is_dns_label(bad), "{bad}");
        }
    }

    #[test]
    fn subdomains() {
        assert!(is_dns_subdomain("a.b-c.d", 53));
        assert!(!is_dns_subdomain("a..b", 53));
        assert!(!is_dns_subdomain(".a", 53));
        assert!(!is_dns_subdomain(&"a".repeat(54), 53));
    }
}
