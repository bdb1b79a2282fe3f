// Package docker converges Docker containers, images, networks and volumes
// with converge: each is an Item, and a Project (written in Go or loaded
// from a Compose file with LoadCompose) becomes a graph with Project.Graph.
// Start with LoadCompose and TargetBuild; docs/device-agent.md is the guide.
//
// The engine is the only source of current state. Everything the package
// creates carries LabelOwner and LabelProject; containers also carry the
// hash of our canonical spec (LabelSpecHash) and one short hash per field
// the user specified (LabelSpecFields). A container is compared only on
// what the user specified: a changed field recreates it (create under a
// temporary name, stop, remove, rename, start), a stopped container that
// should run is started, a paused one is unpaused (its state says Paused,
// and Check requires work), and one changed behind our back (disconnected
// from its network, running another image) is repaired. Owned containers
// the project no longer names are removed; objects we do not own are never
// touched.
//
// Guarantees of a walk over a project:
//
//   - Preflight: every image the project needs is resolved (present, or
//     pulled) before any network, volume or container is created or any
//     orphan removed. An image that is missing under PullNever, or that
//     cannot be pulled, fails the walk with an *ImageError naming the
//     image and the services using it, and nothing is created. A dry run
//     reports the same error: a missing PullNever image, or one its
//     registry does not serve (asked with DistributionInspect, a read).
//   - Interrupted runs are finished: a container left created but not
//     started is started; a recreate killed after creating the new
//     container under its temporary name (TempName) is completed by
//     adopting that container when it has the target spec (ActionAdopt),
//     and by removing it otherwise. Only containers carrying the project's
//     labels are adopted; a name taken by a container we do not own is
//     ErrNotOwned, and the error names that container.
//   - An interrupted run is finished by the very next one, however soon it
//     starts. A cancelled walk does not return while a write it sent to
//     the engine (a create, start, rename, remove, unpause, network or
//     volume write) is unanswered: the engine carries such a write out
//     whether or not its client waits, so the item waits for the answer,
//     for at most WriteGrace, and the next walk's listing sees what it did;
//     a write not yet sent when the walk is cancelled is not sent. Stops
//     and pulls, which may take long, are cancelled at once. When a create
//     still meets a container under its name (the answer of a create was
//     lost with the process that sent it, or another process created it
//     after the walk listed the project), the holder is inspected: one of
//     the project's own containers is adopted when it has the target spec
//     (and connected to the networks it misses) and replaced otherwise.
//   - Clean (converge.Clean) removes in reverse dependency order:
//     containers (dependents first), then the project's other owned
//     containers (orphans), then networks, volumes and images, so nothing
//     is removed while a container still uses it. Volumes and their data
//     are kept unless Project.RemoveVolumes is set, images unless
//     Project.RemoveImages is set, as with "docker compose down".
//   - Failures say why: a container that exits or turns unhealthy within
//     one PollInterval of being started fails with a *ContainerError, and a
//     depends_on wait that fails or times out with a *DependencyError
//     naming the service and condition; a dependency that exits or turns
//     unhealthy ends the wait at once. Both carry the last lines of the
//     container's log (at most LogTailLines lines and LogTailBytes bytes),
//     with secret values redacted.
//
// Update locks, as on device supervisors: a container whose application
// must not be interrupted declares the path of a lock file inside it
// (ContainerSpec.UpdateLock; in a Compose file the service label
// io.convergekit.update-lock, LabelUpdateLock). The application creates the
// file around its critical work, in a volume or bind mount (or its own
// filesystem; not a tmpfs), and removes it afterwards. Right before
// recreating, stopping or removing a container that declares a lock —
// including as an orphan, or in Clean — the item asks the engine whether
// the file exists (ContainerStatPath, a read), and while it does fails with
// a *LockError naming the container and the lock, matching
// converge.ErrLocked, and changes nothing of that container; the other
// containers of the walk go on. Starting a stopped container, unpausing
// one and creating a missing one are not refused. A forced walk
// (converge.WithForce, or TargetReconciler.TriggerForced) goes past locks.
// The lock is per container, looked up only before a change it guards,
// and a lock that cannot be read (engine error) fails the change rather
// than counting as released.
//
// Images: a tag that now points to another image ID (someone ran docker
// tag, or a pull updated it) is noticed, and the containers still running
// the old image ID are recreated (plan field "image-id"). Under PullAlways
// the registry is asked once per walk and image (DistributionInspect)
// which manifest the tag names; when the local image does not carry that
// repository digest it is pulled again (or, for KillThenDownload, after
// the old container is removed) and its containers are recreated. When the
// registry cannot be asked, the local image stands.
//
// Updates follow balena's strategies (ContainerSpec.Update; in a Compose
// file the label io.balena.update.strategy or x-update): download-then-kill
// (the default: pull, create the new container, then replace the old),
// kill-then-download (stop and remove, then pull and create),
// delete-then-download (stop and remove, remove the old image, then pull),
// hand-over (start the new container beside the old, wait until it is
// healthy or creates HandoverCompleteFile, then remove the old; a new
// container with a healthcheck still not healthy at HandoverTimeout is
// removed and the old one kept: *HandoverError) and auto (download-then-kill,
// or delete-then-download when the disk is short). With
// ContainerSpec.ImageSize, the free space of the engine's data root is
// checked before anything is stopped or pulled, and a disk too full is a
// *SpaceError (ErrNoSpace) with nothing changed; the size of an image is
// otherwise unknown (no registry manifest is read, and a build's size is
// known only after it), and then nothing is checked. Once every container
// converged, the images the package pulled or built for the containers it
// replaced, and that no container uses any more, are removed (see
// LabelImageBrought, Project.KeepImages). A target that keeps failing can
// be rolled back to the last one that converged by the reconciler that
// runs it (converge.TargetReconcilerConfig.RollbackAfter).
//
// Confirming that a converged project is converged costs a constant number
// of engine calls, whatever the number of containers: the project item
// lists the project's containers by label (a second time by compose's
// label when one of them is missing) and, at the same time, the
// images they use, once per walk, and only what differs is inspected. PullAlways adds one
// registry question per image (not per container). Bringing containers up
// costs, beyond each one's create and start, one inspect per started
// container: the early-exit watch's, one PollInterval after the start,
// which is also what the walk verifies the container with; a network the
// walk created is verified with the engine's answer to its create. Dry
// runs (converge.ApplyDry) call no write endpoint; Plans turns their report
// into the action planned for each container.
//
// Invalid values never reach the engine. LoadCompose checks every service
// before compose-go builds the project (ports, durations, healthcheck
// retries, restart policy), and Project.Graph checks every ContainerSpec
// (host ports and IPs, protocols, restart policy, negative durations,
// environment names, enums); both return a *SpecError (matching
// ErrInvalidSpec) that names the service and the field — Compose names for
// a file ("healthcheck.interval"), Go names for a Project
// ("Ports[0].HostPort"). The container options of balena's Compose list
// and Compose v2's (privileged, devices, network_mode, sysctls, tmpfs,
// ulimits, memory and CPU limits, ...) are ContainerSpec fields, checked
// the same way and part of the spec hash: changing one recreates the
// container.
//
// A service with Build has its image built from a local context through
// the engine's build API (ImageBuilder) by an item that runs before any
// container is created; the image carries LabelBuildKey, a digest of the
// context (.dockerignore honoured) and the options, so an unchanged
// context is not built again. A failed build is an *ImageError matching
// ErrBuildFailed with the end of the build output, secret build arguments
// redacted.
//
// Environment values are never part of a state, a report or an event: they
// are compared through short hashes. Errors about a container, and the log
// tails they carry, are scrubbed of the values of secret keys (see
// IsSecretEnv) and of the password of every URL with credentials
// (postgres://app:pw@db becomes postgres://app:[redacted]@db), whether the
// URL is in the spec (an environment value, a command argument, a label),
// in the log or only in the engine's message. Errors about an image (a
// pull, a registry lookup, a removal) are scrubbed of URL passwords the
// same way. Scrubbing keeps the error's
// shape: errors.As still finds each of the package's typed errors of the
// chain (*ContainerError, *DependencyError, *ImageError, ...), its string
// fields scrubbed, and errors.Is each sentinel and engine classification
// (github.com/containerd/errdefs IsNotFound, IsConflict, ...); an engine
// error type whose message quoted a secret is no longer found by
// errors.As, since its fields could hold the secret. Nothing reachable
// through the chain (messages, Unwrap, string fields) carries a secret.
//
// The hashes in LabelSpecHash and LabelSpecFields are HMAC-SHA256 under
// Project.HashKey (LoadOptions.HashKey). With a secret key, whoever reads
// the labels — in engine events, monitoring exports, `docker ps` output —
// cannot test a guessed secret offline. What the engine API stores beside
// an object (labels, names, options) is open to whoever can read those
// labels, and a volume's content needs a container to reach, so the key is
// the program's, kept where its state is: LoadHashKey creates a random key
// once in the program's converge.Store (the boltstore file of a device
// agent, the pgstore database of replicas; sealed when the store has a
// Sealer) and returns the same key on every restart and to every replica,
// so nothing is recreated for want of it. Keep it stable: a new key
// recreates every container once. The key is opt-in: when HashKey is nil
// (the default) it is derived from the project name, which anyone can
// recompute, so a label reader can test a guessed value of a secret against
// the labels; set HashKey wherever labels may be seen by someone who must
// not learn the environment. Containers labelled by older versions with
// unkeyed hashes are recreated once, with the plan field "spec".
//
// Side by side with compose's CLI: containers, networks and volumes carry
// compose's labels too (LabelComposeProject and the others), so "docker
// compose -p P ps", "logs" and "down" see a project converge runs. The
// containers compose started for the project (LabelComposeProject, not
// one-off) are the project's: one whose compose configuration hash is the
// service's ContainerSpec.ComposeHash is adopted as it is (renamed to the
// package's name when compose named it otherwise, ActionRename), another
// is replaced, and those of services the project no longer names are
// orphans. The reverse holds where ContainerSpec.ComposeHash is set:
// "docker compose up" (ComposeVersion) on the same file recreates nothing
// converge started. Where it is not set (a Go-built spec, a service with a
// skipped field or a secret value, see ContainerSpec.ComposeHash), and
// with docker-compose 1.x, whose hash is computed otherwise, compose's
// next up recreates the container, once. Compose keys networks and
// volumes by their key in the file: one given an explicit name in the
// file is labelled with its name as its key, so "docker compose down"
// without the file does not find it.
//
// Errors read once: "docker: <object>: <step>: <cause>", with one package
// prefix and the object named once (the engine's own message may name it
// again). The sentinels are bare phrases to match with errors.Is.
//
// WatchEvents turns engine events into reconcile triggers: it returns once
// subscribed, passes the package's own Event (never the engine's message
// or labels), and loses no change made after it returns. TargetBuild
// lets a converge.TargetReconciler keep a Project converged, so a killed
// container is back within a pass.
//
// A Project is stored as a deliberate JSON form (Project.MarshalJSON):
// a format version (ProjectFormat), field names in Compose's vocabulary
// ("services", "image", "environment", "depends_on", "stop_grace_period"),
// enums by name, durations as text, zero values left out; reading it
// refuses unknown and repeated fields with a *DecodeError naming the
// culprit, and still reads the form v0.1.0 stored. What is given at run
// time is never stored: Metrics, Logger and HashKey are not part of the
// form, so a stored target never holds the hash key. A program gives them
// once, as a Runtime to TargetBuild, which applies them to every project
// it builds, the targets it resumes from its store included.
//
// Seeing it work: Project.Metrics (a converge.Metrics, such as the
// prometheus module's) counts every engine call of the project's graph by
// operation, the Engine method's name, in
// converge_docker_engine_calls_total{operation} and
// converge_docker_engine_errors_total{operation} (MetricEngineCalls,
// MetricEngineErrors); Instrument wraps any Engine, for WatchEvents say,
// to count the same. Counting changes no call: a converged project still
// costs a constant number of them. Project.Logger (a *slog.Logger) logs
// every change made on the engine (create, start, stop, remove, rename,
// unpause, pull, networks and volumes) with the project, service and
// container names; environment values are never logged, and errors are
// scrubbed of secrets as above.
//
// The Engine interface is the subset of the Docker client the package uses;
// docker/dockertest has an in-memory fake that counts calls per endpoint.
package docker
