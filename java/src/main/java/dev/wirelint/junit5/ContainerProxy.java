package dev.wirelint.junit5;

import java.nio.file.Path;
import java.nio.file.Paths;

/**
 * The run's wirelint in a {@link WirelintContainer}, for {@code
 * wirelint.container=true}. Only this class and {@link WirelintContainer}
 * need Testcontainers: {@link Session} reaches them through {@link
 * Session.Container}, so a run without the option never loads them.
 */
final class ContainerProxy implements Session.Container {
  private final WirelintContainer container;
  private final String image;

  private ContainerProxy(WirelintContainer container, String image) {
    this.container = container;
    this.image = image;
  }

  /** Starts wirelint's image in front of {@code upstream}; its final report goes to {@code report}. */
  static Session.Container start(Options options, String upstream, Path report) {
    String image = options.image != null ? options.image : WirelintContainer.DEFAULT_IMAGE;
    WirelintContainer container;
    try {
      container = new WirelintContainer(image);
    } catch (NoClassDefFoundError e) {
      throw new IllegalStateException(
          "wirelint: wirelint.container=true starts wirelint with Testcontainers, which is not on the test class"
              + " path: add org.testcontainers:testcontainers (scope test) to the project",
          e);
    }
    container.withUpstream(upstream).withReport(report).withShowValues(options.showValues);
    if (options.config != null) {
      container.withConfig(Paths.get(options.config));
    }
    try {
      container.start();
    } catch (IllegalStateException e) {
      if (String.valueOf(e.getMessage()).startsWith("wirelint: ")) {
        throw e; // WirelintContainer's own, which says it all
      }
      throw failed(image, container, e);
    } catch (RuntimeException e) {
      throw failed(image, container, e);
    }
    return new ContainerProxy(container, image);
  }

  private static IllegalStateException failed(String image, WirelintContainer container, RuntimeException e) {
    String output = container.getOutput().strip();
    return new IllegalStateException(
        "wirelint: the container of "
            + image
            + " did not start: "
            + causes(e)
            + (output.isEmpty() ? "" : "; wirelint printed:\n" + output),
        e);
  }

  private static String causes(Throwable e) {
    StringBuilder out = new StringBuilder(String.valueOf(e.getMessage()));
    for (Throwable c = e.getCause(); c != null && c != c.getCause(); c = c.getCause()) {
      out.append(": ").append(c.getMessage());
    }
    return out.toString();
  }

  @Override
  public String address() {
    return container.getAddress();
  }

  @Override
  public String admin() {
    return container.getAdminAddress();
  }

  @Override
  public String describe() {
    String id = container.getContainerId();
    return "in the container " + (id == null ? "?" : id.substring(0, Math.min(12, id.length()))) + " of " + image;
  }

  @Override
  public String stop() {
    container.stop();
    Integer code = container.getExitCode();
    return code == null ? "(unknown)" : String.valueOf(code);
  }

  @Override
  public String log() {
    String problem = container.stopProblem();
    return container.getOutput() + (problem == null ? "" : "\n(wirelint: " + problem + ")");
  }
}
