import { defineConfig } from "vite";
import preact from "@preact/preset-vite";

// `npm run dev` proxies /api to a running engine (default 127.0.0.1:4937); the token then comes
// from VITE_KEYHAVEN_TOKEN (see src/ipc/index.ts), since Vite does not replace the placeholder.
const engine = process.env.KEYHAVEN_URL ?? "http://127.0.0.1:4937";

export default defineConfig({
  plugins: [preact()],
  base: "./",
  build: { outDir: "dist", emptyOutDir: true, sourcemap: false },
  server: {
    proxy: {
      "/api": {
        target: engine,
        changeOrigin: true,
        // The engine refuses foreign Origins; the dev server's own is one.
        configure: (proxy) => proxy.on("proxyReq", (req) => req.removeHeader("origin")),
      },
    },
  },
  test: { environment: "node", include: ["src/**/*.test.ts"] },
});
