// Takes the microphone's frames on the audio thread, resamples them to the
// rate the page asks for (linear interpolation) and posts 20 ms blocks.
class PcmTap extends AudioWorkletProcessor {
  constructor(options) {
    super();
    this.rate = options.processorOptions.rate;
    this.step = sampleRate / this.rate;
    this.pos = 0;
    this.prev = 0;
    this.block = new Float32Array(Math.round(this.rate / 50));
    this.filled = 0;
  }
  process(inputs) {
    const x = inputs[0] && inputs[0][0];
    if (!x) return true;
    // this.pos: where the next output sample lies, in input samples from
    // the first of x (-1 is the last one of the previous call)
    while (this.pos < x.length - 1) {
      const i = Math.floor(this.pos);
      const f = this.pos - i;
      const a = i < 0 ? this.prev : x[i];
      this.block[this.filled++] = a + (x[i + 1] - a) * f;
      if (this.filled === this.block.length) {
        this.port.postMessage(this.block.slice());
        this.filled = 0;
      }
      this.pos += this.step;
    }
    this.pos -= x.length;
    this.prev = x[x.length - 1];
    return true;
  }
}
registerProcessor('pcm-tap', PcmTap);
