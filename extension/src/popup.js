// personkit popup: talks only to the worker (never to the relay, never holds the token). Element ids are test
// hooks documented in TESTING.md.

const $ = (id) => document.getElementById(id);

function send(msg) {
  return chrome.runtime.sendMessage(msg);
}

let current = null;

function setText(el, text) {
  if (el.textContent !== text) el.textContent = text;
}

function renderPairStatus(s) {
  const el = $('pair-status');
  el.classList.remove('paired', 'signin');
  if (s.signInRequired) {
    setText(el, 'Sign in again: the relay no longer accepts this browser. Enter a new pairing code.');
    el.classList.add('signin');
  } else if (s.paired) {
    setText(el, `Paired with ${s.settings.relayUrl}`);
    el.classList.add('paired');
  } else {
    setText(el, 'Not paired');
  }
}

function renderSurfaces(s) {
  const list = $('surfaces');
  for (const surf of s.surfaces) {
    let li = list.querySelector(`li[data-id="${CSS.escape(surf.id)}"]`);
    if (!li) {
      li = document.createElement('li');
      li.dataset.id = surf.id;
      const dot = document.createElement('span');
      dot.className = 'dot';
      dot.setAttribute('data-health', surf.id);
      const name = document.createElement('label');
      name.className = 'name';
      const box = document.createElement('input');
      box.type = 'checkbox';
      box.setAttribute('data-surface', surf.id);
      box.addEventListener('change', () => {
        send({ type: 'setSettings', patch: { enabled: { [surf.id]: box.checked } } }).then(refresh);
      });
      name.append(box, ` ${surf.name}`);
      li.append(dot, name);
      if (surf.status === 'experimental') {
        const tag = document.createElement('span');
        tag.className = 'exp';
        tag.textContent = 'experimental';
        li.append(tag);
      }
      list.append(li);
    }
    li.hidden = surf.status === 'experimental' && !s.settings.experimental;
    const box = li.querySelector('input[data-surface]');
    if (box.checked !== surf.enabled && document.activeElement !== box) box.checked = surf.enabled;
    const dot = li.querySelector('[data-health]');
    dot.setAttribute('data-status', surf.light);
    dot.title = `${surf.light}: ${surf.accepted} delivered from this browser`;
  }
}

function renderPatterns(errors) {
  const box = $('patterns-status');
  box.replaceChildren();
  if (!errors || errors.length === 0) {
    const ok = document.createElement('span');
    ok.className = 'ok';
    ok.textContent = current && current.patterns.length ? `${current.patterns.length} pattern(s) active` : '';
    box.append(ok);
    return;
  }
  for (const e of errors) {
    const line = document.createElement('div');
    line.className = 'bad';
    line.textContent = `Invalid (line ${e.index + 1}, not used): ${e.pattern} — ${e.message.split('\n').pop()}`;
    box.append(line);
  }
}

function render(s) {
  current = s;
  renderPairStatus(s);
  const relay = $('relay-url');
  if (document.activeElement !== relay && !relay.dataset.touched) relay.value = s.settings.relayUrl || '';
  $('kill-switch').checked = !!s.settings.killSwitch;
  $('experimental').checked = !!s.settings.experimental;
  setText($('queue-length'), String(s.queueLength));
  setText($('sent-count'), String(s.sent));
  setText($('held-count'), String(s.held));
  $('queue-warning').hidden = !s.nearFull;
  const err = $('last-error');
  err.hidden = !s.lastError;
  if (s.lastError) setText(err, `Last delivery problem: ${s.lastError.message} (${s.lastError.code})`);
  renderSurfaces(s);
  const ta = $('patterns');
  if (document.activeElement !== ta && !ta.dataset.touched) {
    ta.value = s.patterns.join('\n');
    renderPatterns(s.patternErrors);
  }
}

async function refresh() {
  const s = await send({ type: 'popupState' });
  if (s && !s.error) render(s);
}

$('relay-url').addEventListener('input', (e) => {
  e.target.dataset.touched = '1';
});
$('patterns').addEventListener('input', (e) => {
  e.target.dataset.touched = '1';
});

$('pair-button').addEventListener('click', async () => {
  const status = $('pair-status');
  status.classList.remove('paired', 'signin');
  status.textContent = 'Pairing…';
  const r = await send({ type: 'pair', relayUrl: $('relay-url').value.trim(), code: $('pair-code').value.trim() });
  if (r && r.ok) {
    $('pair-code').value = '';
    delete $('relay-url').dataset.touched;
    await refresh();
  } else {
    status.textContent = (r && r.error) || 'Pairing failed';
    status.classList.add('signin');
  }
});

$('kill-switch').addEventListener('change', (e) => {
  send({ type: 'setSettings', patch: { killSwitch: e.target.checked } }).then(refresh);
});
$('experimental').addEventListener('change', (e) => {
  send({ type: 'setSettings', patch: { experimental: e.target.checked } }).then(refresh);
});

$('save-patterns').addEventListener('click', async () => {
  const lines = $('patterns').value.split('\n');
  const r = await send({ type: 'setPatterns', patterns: lines });
  if (r && r.ok) {
    delete $('patterns').dataset.touched;
    await refresh();
    renderPatterns(r.errors);
  }
});

refresh();
setInterval(refresh, 2000);
