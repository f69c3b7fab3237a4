package reconcile

// FullPath turns r's plan fast paths off (on) or on again: what the last
// plan left (the declared names' shape and order, records, holders'
// labels), and keeping a container whose record is its declaration's
// without judging it further. For the differential test of
// the fast path against the full one.
func FullPath(r *Reconciler, on bool) { r.fullPath = on }
