// The page's client: the microphone through an AudioWorklet, 16 kHz PCM16
// sent over the server's Realtime WebSocket (/v1/realtime), partial text
// from the delta events, final lines from the completed events, each with
// its latency: from when its last word's audio was sent to when the line came.
'use strict';
const RATE = 16000;
const $ = (id) => document.getElementById(id);
let ws = null, ctx = null, media = null, node = null;
let closing = null;    // after Stop: the timer that closes if no line comes
let sent = 0;          // samples sent
let marks = [];        // [samples sent through, performance.now()] per block
let latencies = [];
const partials = new Map();

function status(s) { $('status').textContent = s; }

function base64Pcm16(f32) {
  const bytes = new Uint8Array(f32.length * 2);
  const view = new DataView(bytes.buffer);
  for (let i = 0; i < f32.length; i++) {
    const s = Math.max(-1, Math.min(1, f32[i]));
    view.setInt16(2 * i, s < 0 ? s * 32768 : s * 32767, true);
  }
  let bin = '';
  for (let i = 0; i < bytes.length; i += 0x8000) {
    bin += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  }
  return btoa(bin);
}

// When the sample at `seconds` of the stream was sent.
function sentAt(seconds) {
  const n = seconds * RATE;
  for (const [through, t] of marks) if (through >= n) return t;
  return marks.length ? marks[marks.length - 1][1] : performance.now();
}

function clock(s) {
  const m = Math.floor(s / 60);
  return `${m}:${(s - 60 * m).toFixed(1).padStart(4, '0')}`;
}

function showPartial() {
  $('partial').textContent = [...partials.values()].join(' ');
}

function onEvent(e) {
  switch (e.type) {
    case 'conversation.item.input_audio_transcription.delta':
      partials.set(e.item_id, (partials.get(e.item_id) || '') + e.delta);
      showPartial();
      // counted where a test (or a person's console) can read it
      document.body.dataset.deltas = String(Number(document.body.dataset.deltas || 0) + 1);
      break;
    case 'conversation.item.input_audio_transcription.completed': {
      partials.delete(e.item_id);
      showPartial();
      if (closing) close();
      // a commit over silence gives an empty line: nothing to show
      if (!e.transcript) break;
      const words = e.words || [];
      const li = document.createElement('li');
      const time = document.createElement('span');
      time.className = 'time';
      time.textContent = words.length
        ? `${clock(words[0].start)} - ${clock(words[words.length - 1].end)}` : '';
      const text = document.createElement('span');
      text.className = 'text';
      text.textContent = e.transcript;
      li.append(time, text);
      if (words.length) {
        const ms = performance.now() - sentAt(words[words.length - 1].end);
        latencies.push(ms);
        const lat = document.createElement('span');
        lat.className = 'lat';
        lat.textContent = `${Math.round(ms)} ms`;
        li.append(lat);
        const sorted = [...latencies].sort((a, b) => a - b);
        $('summary').textContent = `last word sent -> final line: median ${Math.round(sorted[sorted.length >> 1])} ms over ${sorted.length} lines`;
      }
      $('finals').append(li);
      break;
    }
    case 'session.created':
      status('listening');
      break;
    case 'error':
      if (closing) close();
      else status(`error: ${e.error && e.error.message}`);
      break;
  }
}

async function start() {
  $('start').disabled = true;
  // a new connection: the server's clock starts again
  sent = 0;
  marks = [];
  try {
    media = await navigator.mediaDevices.getUserMedia({
      audio: { channelCount: 1, echoCancellation: false, noiseSuppression: false, autoGainControl: false },
    });
    // the browser resamples the microphone to 16 kHz itself (filtered);
    // where it cannot join a stream of another rate (Firefox), the
    // worklet's interpolation does
    ctx = new AudioContext({ sampleRate: RATE });
    let source;
    try {
      source = ctx.createMediaStreamSource(media);
    } catch (err) {
      ctx.close();
      ctx = new AudioContext();
      source = ctx.createMediaStreamSource(media);
    }
    await ctx.audioWorklet.addModule('/worklet.js');
    node = new AudioWorkletNode(ctx, 'pcm-tap', { processorOptions: { rate: RATE } });
    // a browser only pulls a node that reaches the speakers: through silence
    const mute = ctx.createGain();
    mute.gain.value = 0;
    node.connect(mute).connect(ctx.destination);
    // a browser cannot set headers on a WebSocket: the key rides as a
    // subprotocol, as OpenAI's browser clients send it
    const protocols = ['realtime'];
    if ($('key').value) protocols.push(`openai-insecure-api-key.${$('key').value}`);
    const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
    ws = new WebSocket(`${scheme}://${location.host}/v1/realtime?intent=transcription`, protocols);
    ws.onmessage = (m) => onEvent(JSON.parse(m.data));
    ws.onclose = (c) => {
      status(c.code === 1000 ? 'stopped' : `closed (${c.code} ${c.reason || 'refused: a wrong key?'})`);
      stopMic();
      ws = null;
      $('stop').disabled = true;
      $('start').disabled = false;
    };
    ws.onopen = () => {
      ws.send(JSON.stringify({
        type: 'session.update',
        session: {
          type: 'transcription',
          audio: { input: { format: { type: 'audio/pcm', rate: RATE }, turn_detection: { type: 'server_vad' } } },
        },
      }));
      node.port.onmessage = (m) => {
        if (!ws || ws.readyState !== WebSocket.OPEN) return;
        ws.send(JSON.stringify({ type: 'input_audio_buffer.append', audio: base64Pcm16(m.data) }));
        sent += m.data.length;
        marks.push([sent, performance.now()]);
        if (marks.length > 30000) marks = marks.slice(-20000);
      };
      source.connect(node);
      $('stop').disabled = false;
    };
  } catch (err) {
    status(`cannot start: ${err.message}`);
    stopMic();
    close();
    $('start').disabled = false;
  }
}

function stopMic() {
  if (node) node.port.onmessage = null;
  if (media) media.getTracks().forEach((t) => t.stop());
  if (ctx) ctx.close();
  media = ctx = node = null;
}

function close() {
  clearTimeout(closing);
  closing = null;
  if (ws) ws.close(1000);
}

// Stop: the microphone stops, what was said so far becomes a final line
// (a commit), then the connection closes
function stop() {
  $('stop').disabled = true;
  stopMic();
  if (!ws || ws.readyState !== WebSocket.OPEN) return close();
  status('finishing');
  ws.send(JSON.stringify({ type: 'input_audio_buffer.commit' }));
  closing = setTimeout(close, 5000);
}

$('start').onclick = start;
$('stop').onclick = stop;
