// Package docker converges Docker containers, images, networks and volumes
// with converge: each is an Item, and a Project (written in Go or loaded
// from a Compose file with LoadCompose) becomes a graph with Project.Graph.
//
// The engine is the only source of current state. Everything the package
// creates carries LabelOwner and LabelProject; containers also carry the
// hash of our canonical spec (LabelSpecHash) and one short hash per field
// the user specified (LabelSpecFields). A container is compared only on
// what the user specified: a changed field recreates it (create under a
// temporary name, stop, remove, rename, start), a stopped container that
// should run is started, and one changed behind our back (disconnected
// from its network, running another image) is repaired. Owned containers
// the project no longer names are removed; objects we do not own are never
// touched.
//
// Confirming that a converged project is converged costs a constant number
// of engine calls, whatever the number of containers: the project item
// lists the project's containers by label and the images they use, once
// per walk, and only what differs is inspected. Dry runs (converge.ApplyDry)
// call no write endpoint; Plans turns their report into the action planned
// for each container.
//
// Environment values are never part of a state, a report or an event: they
// are compared through short hashes, and engine errors are scrubbed of the
// values of secret keys (see IsSecretEnv).
//
// WatchEvents turns engine events into reconcile triggers, and TargetBuild
// lets a converge.TargetReconciler keep a Project converged, so a killed
// container is back within a pass.
//
// The Engine interface is the subset of the Docker client the package uses;
// docker/dockertest has an in-memory fake that counts calls per endpoint.
package docker
