export { tetherServer, startingServer, localUser, type TetherServer, type TetherServerOptions } from './server.ts';
export { WsGateway, CLOSE, type WsGatewayOptions } from './wsGateway.ts';
export { httpApi, type HttpApiOptions } from './httpApi.ts';
export { authenticator, parseTokens, type Authenticate, type AuthOptions } from './auth.ts';
export { allowedHosts, allowsHost, thisMachine, type MachineNames } from './hostCheck.ts';
export { pageAssets, PAGE_CSP, type PageAsset } from './pageAssets.ts';
