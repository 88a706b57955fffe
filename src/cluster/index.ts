export { ClusterOwnership, LeaseLapsedError, soloOwnership, type Ownership, type Route } from './ownership.ts';
export { ClusterRouter } from './clusterRouter.ts';
export { NotOwnerError } from './forwarding.ts';
