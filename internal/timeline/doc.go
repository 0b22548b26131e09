// Package timeline draws one chaos trial's recorded history (oracle.History)
// as an SVG picture: a lane per client with its holds and writes, a lane per
// node with its faults, violations in red. chaos.WriteSVG is its public face;
// the etcd comparison draws its own trials with it.
package timeline
