//! What the engine's integration tests share.

use culprit_core::method::{Attribution, BlameOptions, SlotBlame, TaskBlame, VictimStages};

/// The option sets every comparison runs: the defaults, and each option
/// changed alone.
pub fn variants() -> Vec<BlameOptions> {
    vec![
        BlameOptions::default(),
        BlameOptions {
            slots: SlotBlame::Direct,
            ..Default::default()
        },
        BlameOptions {
            stages: VictimStages::All,
            ..Default::default()
        },
        BlameOptions {
            tasks: TaskBlame::Last,
            ..Default::default()
        },
        BlameOptions {
            attribution: Attribution::Paper,
            ..Default::default()
        },
    ]
}
