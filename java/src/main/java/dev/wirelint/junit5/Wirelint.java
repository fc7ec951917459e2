package dev.wirelint.junit5;

/**
 * Static access to the run's wirelint, for what a system property cannot
 * reach: {@code @DynamicPropertySource}, or a client built by hand.
 *
 * <pre>{@code
 * @WirelintTest
 * @SpringBootTest
 * class BlogTest {
 *   @DynamicPropertySource
 *   static void mongo(DynamicPropertyRegistry registry) {
 *     registry.add("spring.mongodb.uri", Wirelint::uri);
 *   }
 * }
 * }</pre>
 *
 * <p>Both methods need the extension on the test class ({@link WirelintTest
 * @WirelintTest} or {@code @ExtendWith(WirelintExtension.class)}): it owns
 * the proxy and stops it at the end of the run.
 */
public final class Wirelint {
  private Wirelint() {}

  /**
   * The connection string to use instead of the upstream's: wirelint, in
   * front of the configured upstream ({@code wirelint.upstream},
   * {@code WIRELINT_UPSTREAM} or {@code wirelint.env}). With
   * {@code wirelint.enabled=false}, that upstream itself.
   */
  public static String uri() {
    return Session.current().uri();
  }

  /**
   * Starts the run's wirelint in front of {@code upstream} (once: later calls
   * must name the same upstream; the jar's binary, or with {@code
   * wirelint.container=true} a {@link WirelintContainer}) and returns the
   * connection string to use instead, e.g. for a Testcontainers database:
   * {@code registry.add("spring.mongodb.uri", () -> Wirelint.uri(mongo.getReplicaSetUrl()))}.
   * With {@code wirelint.enabled=false} it returns {@code upstream} itself.
   */
  public static String uri(String upstream) {
    return Session.current().start(upstream, "Wirelint.uri(…)");
  }
}
