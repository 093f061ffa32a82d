//! [`ViewFile`]: the node view written to a file.

use std::path::PathBuf;

use kpng_model::view::NodeView;

use crate::{Round, Sink, SinkError};

/// Writes the node view (with its revision) after each round, as YAML or
/// JSON: to a file, replaced atomically (written beside it, then renamed),
/// or to standard output when the path is `-`. What a node's proxy would
/// program, for debugging (`kpng … to-file --output -`).
#[derive(Clone, Debug)]
pub struct ViewFile {
    path: PathBuf,
    json: bool,
}

impl ViewFile {
    /// Writes YAML to `path` (`-`: standard output).
    pub fn yaml(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            json: false,
        }
    }

    /// Writes JSON to `path` (`-`: standard output).
    pub fn json(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            json: true,
        }
    }
}

impl Sink for ViewFile {
    fn sync(&mut self, round: &Round<'_>) -> Result<(), SinkError> {
        let view: &NodeView = round.view();
        let failed = |e: String| SinkError::backend("to-file", e);
        let text = if self.json {
            let mut text = serde_json::to_string_pretty(view).map_err(|e| failed(e.to_string()))?;
            text.push('\n');
            text
        } else {
            serde_saphyr::to_string(view).map_err(|e| failed(e.to_string()))?
        };
        if self.path.as_os_str() == "-" {
            let mut out = std::io::stdout().lock();
            return std::io::Write::write_all(&mut out, text.as_bytes())
                .map_err(|e| failed(format!("standard output: {e}")));
        }
        let tmp = self.path.with_extension("tmp");
        std::fs::write(&tmp, text).map_err(|e| failed(format!("{}: {e}", tmp.display())))?;
        std::fs::rename(&tmp, &self.path)
            .map_err(|e| failed(format!("{}: {e}", self.path.display())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_view_is_written_whole_as_yaml_or_json() {
        let dir = std::env::temp_dir();
        let view = NodeView {
            revision: 7,
            ..NodeView::default()
        };
        for (mut sink, name) in [
            (
                ViewFile::json(dir.join("kpng-sink-view.json")),
                "kpng-sink-view.json",
            ),
            (
                ViewFile::yaml(dir.join("kpng-sink-view.yaml")),
                "kpng-sink-view.yaml",
            ),
        ] {
            sink.sync(&Round::full(&view)).expect("written");
            let text = std::fs::read_to_string(dir.join(name)).expect("read");
            assert!(text.contains("revision") && text.contains('7'), "{text}");
            let _ = std::fs::remove_file(dir.join(name));
        }
    }
}
