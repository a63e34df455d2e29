-- scafld's language server for Neovim: starts `scafld lsp` for spec files
-- (.scafld/specs/**/*.md) with the workspace (the folder holding .scafld/) as its root.
-- Neovim 0.8+ has vim.lsp.start (one client per root, reused); 0.7 (Debian's) gets the
-- same from vim.lsp.start_client and vim.lsp.buf_attach_client.
local M = {}

local clients = {} -- root -> client id, for Neovim 0.7

local function root_of(file)
  local dir = file:match("^(.*)/%.scafld/specs/")
  return dir
end

function M.setup(opts)
  opts = opts or {}
  local cmd = opts.cmd or { "scafld", "lsp" }
  vim.api.nvim_create_autocmd({ "BufReadPost", "BufNewFile" }, {
    pattern = "*/.scafld/specs/*.md",
    group = vim.api.nvim_create_augroup("scafld_lsp", { clear = true }),
    callback = function(args)
      local root = root_of(vim.api.nvim_buf_get_name(args.buf))
      if not root then
        return
      end
      local config = { name = "scafld", cmd = cmd, root_dir = root }
      if vim.lsp.start then
        vim.lsp.start(config, { bufnr = args.buf })
        return
      end
      local id = clients[root]
      if not id or vim.lsp.client_is_stopped(id) then
        id = vim.lsp.start_client(config)
        clients[root] = id
      end
      if id then
        vim.lsp.buf_attach_client(args.buf, id)
      end
    end,
  })
end

return M
