//! How the store names a tenant's keys in Redis, all under the tenant's hash tag (one cluster
//! slot, as a multi-key script needs).

/// Names a tenant's keys: `<prefix>:{<tenant>}:<kind>:<window>`.
#[derive(Debug, Clone)]
pub(super) struct Keys {
    pub(super) prefix: String,
}

impl Keys {
    pub(super) fn tenant(&self, tenant: &str) -> TenantKeys {
        // The tenant is the hash tag: braces inside it would end the tag early.
        let mut tagged = String::with_capacity(self.prefix.len() + tenant.len() + 3);
        tagged.push_str(&self.prefix);
        tagged.push_str(":{");
        for c in tenant.chars() {
            match c {
                '%' => tagged.push_str("%25"),
                '{' => tagged.push_str("%7B"),
                '}' => tagged.push_str("%7D"),
                c => tagged.push(c),
            }
        }
        tagged.push('}');
        TenantKeys(tagged)
    }
}

pub(super) struct TenantKeys(String);

impl TenantKeys {
    pub(super) fn tokens(&self, minute: u64) -> String {
        format!("{}:tok:{minute}", self.0)
    }
    pub(super) fn requests(&self, minute: u64) -> String {
        format!("{}:req:{minute}", self.0)
    }
    pub(super) fn day(&self, day: u64) -> String {
        format!("{}:day:{day}", self.0)
    }
    pub(super) fn slots(&self) -> String {
        format!("{}:slots", self.0)
    }
    /// What already happened to the request (admit.lua's header).
    pub(super) fn marker(&self, id: u64) -> String {
        format!("{}:once:{id}", self.0)
    }
}

/// A request's member in the set of streams: its id and what it reserved, so that a settlement
/// can find the reservation even of a request whose admission reply was lost.
pub(super) fn member(id: u64, reserved: u64) -> String {
    format!("{id}:{reserved}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_is_the_hash_tag_of_its_keys_whatever_its_name() {
        let keys = Keys {
            prefix: "tm".to_owned(),
        };
        assert_eq!(keys.tenant("team-a").tokens(7), "tm:{team-a}:tok:7");
        assert_eq!(keys.tenant("a}b{c%").slots(), "tm:{a%7Db%7Bc%25}:slots");
        assert_eq!(keys.tenant("x").day(3), "tm:{x}:day:3");
    }
}
