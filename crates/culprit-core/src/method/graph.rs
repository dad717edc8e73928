//! The seven-level iQC-Graph (method.md section 6; 000 §4, App. C; 001 §6):
//! blame contribution on every node, impact factor on every edge, degree of
//! responsibility per victim.

use petgraph::graph::{DiGraph, NodeIndex};
use rustc_hash::FxHashMap;

use super::level4::{Culprit, Level4};
use super::model::Dataset;
use super::responsibility::dor;
use crate::Resource;

/// What a node stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeKey {
    /// Level 0.
    Query,
    /// Level 1.
    Stage(u32),
    /// Level 2.
    Resource(u32, Resource),
    /// Level 3: stage, resource, detail, host (`None`: cluster-wide).
    Host(u32, Resource, u32, Option<u32>),
    /// Level 4: the level-3 key, the culprit and the slot holder it came through.
    Blame(u32, Resource, u32, Option<u32>, Culprit, Option<u32>),
    /// Level 5: a culprit stage.
    CulpritStage(u32),
    /// Level 6: a culprit query, or `gc` / `external` / `unknown`.
    CulpritQuery(u32),
    Cause(Culprit),
}

impl NodeKey {
    pub fn level(&self) -> u8 {
        match self {
            NodeKey::Query => 0,
            NodeKey::Stage(_) => 1,
            NodeKey::Resource(..) => 2,
            NodeKey::Host(..) => 3,
            NodeKey::Blame(..) => 4,
            NodeKey::CulpritStage(_) => 5,
            NodeKey::CulpritQuery(_) | NodeKey::Cause(_) => 6,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Node {
    pub victim: u32,
    pub key: NodeKey,
    /// Blame contribution toward the victim, seconds.
    pub bc: f64,
    /// Degree of responsibility `BC / BC0`; `None` when the victim has no blame.
    pub dor: Option<f64>,
}

/// The graph of a set of victims; edges run from cause to effect and carry
/// the impact factor.
#[derive(Debug, Default)]
pub struct IqcGraph {
    pub graph: DiGraph<Node, f64>,
}

impl IqcGraph {
    /// Builds the graph of each victim query from its level-4 entries.
    /// Victims with no blame still get their level-0 node (BC 0, no DOR).
    pub fn build(ds: &Dataset, victims: &[u32], entries: &Level4) -> IqcGraph {
        let mut graph: DiGraph<Node, f64> = DiGraph::new();
        let mut index: FxHashMap<(u32, NodeKey), NodeIndex> = FxHashMap::default();
        let mut edges: FxHashMap<(NodeIndex, NodeIndex), ()> = FxHashMap::default();
        let mut node = |graph: &mut DiGraph<Node, f64>, victim: u32, key: NodeKey, bc: f64| {
            let ix = *index.entry((victim, key)).or_insert_with(|| {
                graph.add_node(Node {
                    victim,
                    key,
                    bc: 0.0,
                    dor: None,
                })
            });
            graph[ix].bc += bc;
            ix
        };
        for &v in victims {
            node(&mut graph, v, NodeKey::Query, 0.0);
        }
        for e in entries {
            let v = ds.stage_query(e.stage);
            let b = e.seconds;
            let l0 = node(&mut graph, v, NodeKey::Query, b);
            let l1 = node(&mut graph, v, NodeKey::Stage(e.stage), b);
            let l2 = node(&mut graph, v, NodeKey::Resource(e.stage, e.resource), b);
            let l3 = node(
                &mut graph,
                v,
                NodeKey::Host(e.stage, e.resource, e.detail, e.host()),
                b,
            );
            let l4 = node(
                &mut graph,
                v,
                NodeKey::Blame(
                    e.stage,
                    e.resource,
                    e.detail,
                    e.host(),
                    e.culprit(),
                    e.via(),
                ),
                b,
            );
            let mut chain = vec![(l4, l3), (l3, l2), (l2, l1), (l1, l0)];
            match e.culprit() {
                Culprit::Stage(cs) => {
                    let l5 = node(&mut graph, v, NodeKey::CulpritStage(cs), b);
                    let l6 = node(&mut graph, v, NodeKey::CulpritQuery(ds.stage_query(cs)), b);
                    chain.push((l5, l4));
                    chain.push((l6, l5));
                }
                c => {
                    let l6 = node(&mut graph, v, NodeKey::Cause(c), b);
                    chain.push((l6, l4));
                }
            }
            for (a, z) in chain {
                edges.entry((a, z)).or_insert(());
            }
        }
        for (a, z) in edges.into_keys() {
            graph.add_edge(a, z, 0.0);
        }
        // Impact factors and DOR, in one pass over edges and nodes.
        let bc0: FxHashMap<u32, f64> = graph
            .node_weights()
            .filter(|n| n.key == NodeKey::Query)
            .map(|n| (n.victim, n.bc))
            .collect();
        for n in graph.node_weights_mut() {
            n.dor = dor(n.bc, bc0[&n.victim]);
        }
        for e in graph.edge_indices() {
            let (a, z) = graph.edge_endpoints(e).expect("edge");
            let (ba, bz) = (graph[a].bc, graph[z].bc);
            // Victim side: the share of z's blame arriving through a.
            // Culprit side (from level 5 or 6): the share of a's blame leaving through z.
            let f = if graph[a].key.level() >= 5 {
                bz / ba
            } else {
                ba / bz
            };
            graph[e] = if f.is_finite() { f } else { 0.0 };
        }
        IqcGraph { graph }
    }

    /// Nodes of one level.
    pub fn level(&self, level: u8) -> impl Iterator<Item = &Node> {
        self.graph
            .node_weights()
            .filter(move |n| n.key.level() == level)
    }
}
