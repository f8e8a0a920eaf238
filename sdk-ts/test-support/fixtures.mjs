// What several test files (test/) share: the example presets' registry and a logger that says nothing.
import { Registry } from "../dist/index.js";

export const exampleRegistry = () =>
  new Registry({
    vendor_a: { destination: "vendor_a-us", models: { large: ["text"] } },
    vendor_b: { destination: "vendor_b-eu", models: { large: ["text"] } },
    self_hosted: { destination: "self-hosted", models: { "8b": ["text"] } },
  });

export const quiet = { debug() {}, info() {}, warn() {}, error() {} };
