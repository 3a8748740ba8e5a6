// Type declarations of the ES module entry (index.mjs): the same API as
// index.js, as named exports and as the default export.
import redlockc from './index.js';

export * from './index.js';
export default redlockc;
