// scafld's language server in VS Code: starts `scafld lsp` (stdio) for the workspace and
// hands it the spec files; the server publishes diagnostics and findings for any file.
const vscode = require("vscode");
const { LanguageClient, TransportKind } = require("vscode-languageclient/node");

let client;

function activate(context) {
  const command = vscode.workspace.getConfiguration("scafld").get("path") || "scafld";
  const server = { command, args: ["lsp"], transport: TransportKind.stdio };
  client = new LanguageClient(
    "scafld",
    "scafld",
    { run: server, debug: server },
    { documentSelector: [{ scheme: "file", pattern: "**/.scafld/specs/**/*.md" }] }
  );
  context.subscriptions.push(client);
  return client.start();
}

function deactivate() {
  return client ? client.stop() : undefined;
}

module.exports = { activate, deactivate };
