export { tetherServer, startingServer, localUser, type TetherServer, type TetherServerOptions } from './server.ts';
export { WsGateway, CLOSE, type WsGatewayOptions } from './wsGateway.ts';
export { httpApi, type HttpApiOptions } from './httpApi.ts';
export { authenticator, parseTokens, type Authenticate, type AuthOptions } from './auth.ts';
