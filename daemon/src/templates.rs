//! Review templates on disk: the built-ins compiled into scafld and the workspace's
//! `.scafld/templates/*.yaml`. A user file may override a built-in by name; a broken user file
//! is reported and never hides the others.

use std::path::Path;

use scafld_protocol::ErrorKind;
use scafld_protocol::methods::TemplateInfo;

use crate::domain::template::{self, MAX_TEMPLATE_BYTES, Template, TemplateError};
use crate::error::RpcError;

const BUILTIN: [(&str, &str); 3] = [
    ("arch", include_str!("../assets/templates/arch.yaml")),
    ("tasks", include_str!("../assets/templates/tasks.yaml")),
    ("code", include_str!("../assets/templates/code.yaml")),
];

pub const USER_DIR: &str = ".scafld/templates";

/// A usable template and where it came from.
pub struct Loaded {
    pub template: Template,
    /// `built-in`, or the workspace-relative file.
    pub source: String,
    pub overrides_builtin: bool,
}

/// Parse one YAML template document.
pub fn parse(file: &str, text: &str) -> Result<Template, TemplateError> {
    let document: serde_json::Value = serde_saphyr::from_str(text).map_err(|e| TemplateError {
        file: file.to_string(),
        field: String::new(),
        message: format!("not valid YAML: {e}"),
    })?;
    template::load(file, document)
}

/// The built-in templates (they are checked by tests, so they always load).
pub fn builtins() -> Vec<Template> {
    BUILTIN.iter().filter_map(|(name, text)| parse(&format!("built-in {name}.yaml"), text).ok()).collect()
}

/// A workspace template file that cannot be used, and the template it was meant to define (the
/// `name:` it gives, else its file's stem): a run of that name must not fall back to another
/// definition in silence.
pub struct Broken {
    pub name: String,
    pub error: String,
}

/// The name a template file means to define, read as loosely as possible.
fn intended_name(path: &Path, text: Option<&str>) -> String {
    text.and_then(|text| serde_saphyr::from_str::<serde_json::Value>(text).ok())
        .and_then(|document| document.get("name")?.as_str().map(str::to_string))
        .unwrap_or_else(|| path.file_stem().unwrap_or_default().to_string_lossy().into_owned())
}

/// Every usable template of the workspace at `root`, and the errors of broken user files.
pub fn load_all(root: &Path) -> (Vec<Loaded>, Vec<String>) {
    let (loaded, problems, broken) = load_checked(root);
    (loaded, problems.into_iter().chain(broken.into_iter().map(|b| b.error)).collect())
}

/// [`load_all`], with the broken files apart (and what each meant to define) from the other
/// problems (a name defined twice: the first file wins).
fn load_checked(root: &Path) -> (Vec<Loaded>, Vec<String>, Vec<Broken>) {
    let mut loaded: Vec<Loaded> = builtins()
        .into_iter()
        .map(|template| Loaded { template, source: "built-in".into(), overrides_builtin: false })
        .collect();
    let (mut errors, mut broken) = (Vec::new(), Vec::new());
    let mut files: Vec<_> =
        std::fs::read_dir(root.join(USER_DIR)).map(|dir| dir.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"));
    files.sort();
    for path in files {
        let file = format!("{USER_DIR}/{}", path.file_name().unwrap_or_default().to_string_lossy());
        let text = scafld_local::capped::read_text(&path, "template", MAX_TEMPLATE_BYTES).map_err(|e| TemplateError {
            file: file.clone(),
            field: String::new(),
            message: e.to_string(),
        });
        let parsed = text.as_ref().map_err(Clone::clone).and_then(|text| parse(&file, text));
        match parsed {
            Ok(template) => {
                if let Some(other) = loaded.iter().find(|l| l.template.name == template.name && l.source != "built-in")
                {
                    errors.push(format!(
                        "{file}: template `{}` is also defined in {}; the first file wins",
                        template.name, other.source
                    ));
                    continue;
                }
                let overrides_builtin = loaded.iter().any(|l| l.template.name == template.name);
                loaded.retain(|l| l.template.name != template.name);
                loaded.push(Loaded { template, source: file, overrides_builtin });
            }
            Err(e) => broken.push(Broken { name: intended_name(&path, text.as_deref().ok()), error: e.to_string() }),
        }
    }
    loaded.sort_by(|a, b| a.template.name.cmp(&b.template.name));
    (loaded, errors, broken)
}

/// Whether a workspace template file defines a template called `name` (or, broken, means to):
/// `scafld review <name>` would run it, so a task of that name is reviewed with `--task`.
pub fn shadows(root: &Path, name: &str) -> bool {
    let any_file = std::fs::read_dir(root.join(USER_DIR))
        .map(|dir| dir.flatten().any(|e| e.path().extension().is_some_and(|x| x == "yaml" || x == "yml")))
        .unwrap_or(false);
    // Without a template file (the common case) nothing is parsed.
    if !any_file {
        return false;
    }
    let (loaded, _, broken) = load_checked(root);
    loaded.iter().any(|l| l.source != "built-in" && l.template.name == name) || broken.iter().any(|b| b.name == name)
}

/// The command that reviews task `task` of the workspace at `root`, named so that it runs the
/// task's review whatever templates share its name.
pub fn review_command(root: &Path, task: &str) -> String {
    scafld_protocol::cli::review_task(task, shadows(root, task))
}

/// The refusal of a broken template file meant to define `name`, if there is one: `scafld
/// review <name>` with no task of that name meant the template.
pub fn broken_named(root: &Path, name: &str) -> Option<RpcError> {
    let (_, _, broken) = load_checked(root);
    broken.iter().any(|b| b.name == name).then(|| find(root, name).err()).flatten()
}

/// The template called `name`, or an error that lists the available ones.
pub fn find(root: &Path, name: &str) -> Result<Template, RpcError> {
    let (loaded, problems, broken) = load_checked(root);
    // A broken file meant to define this template (an override of a built-in, say): running
    // another definition instead would review by rules the user did not write.
    if let Some(meant) = broken.iter().find(|b| b.name == name) {
        let instead = match loaded.iter().find(|l| l.template.name == name) {
            Some(other) if other.source == "built-in" => {
                format!(", or move it out of {USER_DIR} to run the built-in `{name}`")
            }
            Some(other) => format!(", or remove it to run the one in {}", other.source),
            None => String::new(),
        };
        return Err(RpcError::new(
            ErrorKind::InvalidInput,
            format!("review template `{name}` is broken: {}", meant.error),
        )
        .with_hint(format!("fix the file{instead}")));
    }
    let errors: Vec<String> = problems.into_iter().chain(broken.into_iter().map(|b| b.error)).collect();
    let names: Vec<String> = loaded.iter().map(|l| l.template.name.clone()).collect();
    loaded.into_iter().find(|l| l.template.name == name).map(|l| l.template).ok_or_else(|| {
        let mut message = format!("unknown review template `{name}`; available: {}", names.join(", "));
        if !errors.is_empty() {
            message.push_str(&format!(" (broken: {})", errors.join("; ")));
        }
        RpcError::new(ErrorKind::InvalidInput, message).with_hint("`scafld review list` shows every template")
    })
}

pub fn info(loaded: &Loaded) -> TemplateInfo {
    TemplateInfo {
        name: loaded.template.name.clone(),
        description: loaded.template.description.clone(),
        source: loaded.source.clone(),
        overrides_builtin: loaded.overrides_builtin,
        required_inputs: loaded.template.required.iter().map(|i| i.name.clone()).collect(),
        optional_inputs: loaded.template.optional.iter().map(|i| i.name.clone()).collect(),
    }
}
