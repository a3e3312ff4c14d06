package tier

import (
	"container/list"
	"sync"
)

// DefaultHotChunks is RemoteReaderOptions.HotChunks when zero.
const DefaultHotChunks = 4

// hotChunks keeps the chunks a RemoteReader used last in memory, least
// recently used out first: a consumer catching up reads a chunk in several
// fetches (a 4 MiB chunk, 1 MiB fetches), and each would otherwise read
// the whole chunk file back from the ChunkCache and check it again.
// Chunks are immutable and checked when loaded, so a copy in memory is
// as good as the file. Safe for concurrent use.
type hotChunks struct {
	mu    sync.Mutex
	max   int
	ll    *list.List // of *hotChunk, most recent first
	items map[ChunkID]*list.Element
}

type hotChunk struct {
	id   ChunkID
	data []byte
}

func newHotChunks(n int) *hotChunks {
	return &hotChunks{max: n, ll: list.New(), items: map[ChunkID]*list.Element{}}
}

// get returns chunk id when held.
func (h *hotChunks) get(id ChunkID) ([]byte, bool) {
	if h == nil || h.max <= 0 {
		return nil, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	el, ok := h.items[id]
	if !ok {
		return nil, false
	}
	h.ll.MoveToFront(el)
	return el.Value.(*hotChunk).data, true
}

// put keeps chunk id, dropping the least recently used past the bound.
func (h *hotChunks) put(id ChunkID, data []byte) {
	if h == nil || h.max <= 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if el, ok := h.items[id]; ok {
		h.ll.MoveToFront(el)
		return
	}
	h.items[id] = h.ll.PushFront(&hotChunk{id: id, data: data})
	for h.ll.Len() > h.max {
		el := h.ll.Back()
		h.ll.Remove(el)
		delete(h.items, el.Value.(*hotChunk).id)
	}
}

// drop forgets chunk id (found damaged).
func (h *hotChunks) drop(id ChunkID) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if el, ok := h.items[id]; ok {
		h.ll.Remove(el)
		delete(h.items, id)
	}
}
