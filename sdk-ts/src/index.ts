/** chainclient for Node: the poller (`ChainClient`) and the `Router`, with the Python SDK's promises. */

export * from "./wire.js";
export * from "./document.js";
export * from "./signatures.js";
export { STATE_FORMAT, DIGEST_MISMATCH } from "./stateFile.js";
export * from "./errors.js";
export * from "./receipts.js";
export { outcomeClass, latencyBucket } from "./health.js";
export { DrillTally, FAULT_WORDS, describeDrill, drillBody, drilledAt, takesPartIn, type DrillCounts, type DrillRequest } from "./drills.js";
export * from "./client.js";
export * from "./router.js";
