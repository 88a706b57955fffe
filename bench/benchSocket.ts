// The WebSocket class the bench's Tether clients give the protocol client (src/client/): ws's, as
// every bench client opened it before, without permessage-deflate (the server refuses it anyway).
import WebSocket from 'ws';

export class BenchSocket extends WebSocket {
  constructor(url: string) {
    super(url, { perMessageDeflate: false });
  }
}
