//! `aggregated/instances`: the VMs of a project, by zone, paged.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

use serde_json::{Map, Value, json};

use super::shapes::vm_json;
use super::{Key, Vm, Vms, key};
use crate::realism::mark_unreachable;
use crate::store::API_ROOT;

/// What one request of `aggregated/instances` asks for.
pub(crate) struct ListQuery<'a> {
    /// `(key, value)` label pairs that must all hold.
    pub filter: &'a [(String, String)],
    pub page_size: usize,
    pub page_token: Option<&'a str>,
    /// The zones left out of every page.
    pub unreachable: &'a BTreeSet<String>,
    /// `returnPartialSuccess=true`: name those zones in `unreachables`
    /// rather than as `UNREACHABLE` scopes.
    pub partial: bool,
}

impl Vms {
    /// One page of `aggregated/instances`, only VMs whose labels hold every
    /// `(key, value)` of the filter and that are not in an unreachable zone.
    /// The token is the last VM's `zone.name`; `None` for a bad token.
    pub fn aggregated_page(&self, project: &str, query: &ListQuery<'_>) -> Option<Value> {
        let start = match query.page_token {
            None => Bound::Unbounded,
            Some(token) => {
                let (zone, name) = token.split_once('.')?;
                if zone.is_empty() || name.is_empty() {
                    return None;
                }
                Bound::Excluded(key(project, zone, name))
            }
        };
        let end = Bound::Excluded((format!("{project}\0"), String::new(), String::new()));
        let mut rest = self
            .vms
            .range((start, end))
            .filter(|(k, _)| k.0 == project && !query.unreachable.contains(&k.1))
            .filter(|(_, vm)| {
                query
                    .filter
                    .iter()
                    .all(|(fk, fv)| vm.spec.labels.get(fk).and_then(Value::as_str) == Some(fv))
            });
        let page: Vec<(&Key, &Vm)> = rest.by_ref().take(query.page_size).collect();
        let more = rest.next().is_some();
        let mut items: BTreeMap<String, Vec<Value>> = self
            .zones
            .get(project)
            .into_iter()
            .flatten()
            .filter(|z| !query.unreachable.contains(*z))
            .map(|z| (format!("zones/{z}"), Vec::new()))
            .collect();
        for ((p, zone, name), vm) in &page {
            items
                .entry(format!("zones/{zone}"))
                .or_default()
                .push(vm_json(p, zone, name, vm));
        }
        let items: Map<String, Value> = items
            .into_iter()
            .map(|(scope, vms)| {
                let scoped = if vms.is_empty() {
                    let message = format!("There are no results for scope '{scope}' on this page.");
                    json!({ "warning": {
                        "code": "NO_RESULTS_ON_PAGE",
                        "message": message,
                        "data": [{ "key": "scope", "value": scope }]
                    } })
                } else {
                    json!({ "instances": vms })
                };
                (scope, scoped)
            })
            .collect();
        let mut list = json!({
            "kind": "compute#instanceAggregatedList",
            "id": format!("projects/{project}/aggregated/instances"),
            "items": items,
            "selfLink": format!("{API_ROOT}/projects/{project}/aggregated/instances"),
        });
        if more
            && let Some(((_, zone, name), _)) = page.last()
            && let Some(list) = list.as_object_mut()
        {
            list.insert("nextPageToken".to_owned(), format!("{zone}.{name}").into());
        }
        mark_unreachable(&mut list, query.unreachable, query.partial);
        Some(list)
    }
}
