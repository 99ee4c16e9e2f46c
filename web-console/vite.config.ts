import { defineConfig } from "vitest/config";

// The console is served by every node at /console/ (crates/herald-api/src/api/routes/console.rs embeds dist/). The build
// must be reproducible: `make console-check` rebuilds it and fails when dist/ differs from what
// is committed, so nothing here may depend on the time, the machine or the path.
export default defineConfig({
  base: "/console/",
  esbuild: {
    jsx: "automatic",
    jsxImportSource: "preact",
  },
  build: {
    outDir: "dist",
    emptyOutDir: true,
    target: "es2020",
    sourcemap: false,
    reportCompressedSize: true,
    // One script and one stylesheet: the whole console is small, and one request is fastest.
    modulePreload: { polyfill: false },
  },
  test: {
    include: ["test/**/*.test.ts"],
    environment: "node",
  },
});
