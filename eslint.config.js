// `make lint` checks the page's own modules (static/js/) with ESLint's recommended rules.
// Third-party code (static/vendor/, node_modules/) is not ours to lint.
const js = require("@eslint/js");
const globals = require("globals");

module.exports = [
  { ignores: ["static/vendor/", "node_modules/", ".venv/"] },
  js.configs.recommended,
  {
    files: ["static/js/**/*.js"],
    languageOptions: { ecmaVersion: 2023, sourceType: "module", globals: globals.browser },
  },
  {
    files: ["eslint.config.js"],
    languageOptions: { sourceType: "commonjs", globals: globals.node },
  },
];
